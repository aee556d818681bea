// Screening forward (spec steps 5–13) on a CUDA device: the twin of
// kernels/cpu/screening.h's ScreeningForward, same layouts, fp32. A first,
// straightforward version: one thread per (sequence, tile, query) walks only
// the ⌈w⌉ keys its Softmask reaches and skips the value work of pairs Trim
// rejects. Angles (MiPE) are computed in fp64. Backward and the tiled,
// shared-memory version follow with the GPU training path.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cpu/screening.h"

namespace multiscreen::kernels::cuda {

// P: [B·T, tiles·p_cols()] device, read. tiles: [tiles] host. U: [B·T, tiles·d_v]
// device, written. q_tilde/k_tilde [B, tiles, T, d_k] and v_bar [B, tiles, T, d_v]:
// device scratch, written (the normalized, rotated rows, as the CPU saves them).
absl::Status ScreeningForward(const cpu::ScreeningShape& shape, const float* P, const cpu::TileScalars* tiles,
                              float* q_tilde, float* k_tilde, float* v_bar, float* U, void* stream = nullptr);

}  // namespace multiscreen::kernels::cuda
