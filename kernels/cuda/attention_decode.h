// The Transformer's key-value cache on a CUDA device (kernels/decode_cache.h), the twin
// of kernels/cpu/attention_cache.h: K and V [positions, heads · d_h] grown by doubling,
// and one launch per token and layer, a warp per head: q and k turned by RoPE at the
// position (θ'_p made on the host by cpu::RopeFrequencies, angles in fp64, their cosine
// and sine rounded to fp32 for the turn, as cpu::Rope), unit with qk_norm, the key and
// value appended, then the head's output over positions 0..pos by the forward kernel's
// own per-query function (attention_row.cuh AttendQuery: fp64 scores and sums, an online
// softmax, entmax's τ by bisection). Like the simple forward it walks every key in one
// warp: O(pos) per head, no split over the keys. A prompt chunk (StepRows) is two launches
// per kDecodeRows rows, a warp per (head, row): every row's key and value stored, then
// every row's output over the keys up to its own position (Step's bits).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/decode_cache.h"

namespace multiscreen::kernels::cuda {

// The cache of one layer (kernels::AttentionCache<float>). Error (one line): an odd head
// width or one past kMaxHeadWidth (attention.h), a kind that is not a score → weight map
// (kScreening), or scales not one per head.
absl::StatusOr<std::unique_ptr<AttentionCache<float>>> MakeCudaAttentionCache(const AttentionCacheShape& shape);

}  // namespace multiscreen::kernels::cuda
