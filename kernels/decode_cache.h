// The decoding caches (spec "Inference"; DESIGN's "decode" op): per layer, what a new
// token is screened or attended against, and the one-query step over it, on one device.
// The decoders of model/ (model/decode.h for Multiscreen, model/transformer_decode.h for
// the Transformer) hold one cache per layer beside their kernel table and run the rest of
// a token (embedding, projections, FFN, head) through the table's ops, so one
// orchestration decodes on either device.
//
// Implementations: the CPU's (kernels/cpu/screening_cache.h, kernels/cpu/attention_cache.h,
// any Real: the oracle) and, in a build with CUDA, the GPU's
// (kernels/cuda/screening_decode.h, kernels/cuda/attention_decode.h, float). Conventions
// as the kernel table's (kernels/kernel_table.h): tensors are arrays on the cache's
// device, scalars are host values given at construction, ops run in order on the legacy
// default stream; a failing device call or allocation is fatal. A cache grows as tokens
// come (a finite window to its ⌈w⌉ keys, an infinite window and the KV cache without
// bound). Positions are 0, 1, 2, … one per Step.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/attention_kind.h"
#include "kernels/buffer.h"
#include "kernels/cpu/rope.h"
#include "kernels/screening_types.h"

namespace multiscreen {
namespace kernels {

// Rows one set of a device screening cache's StepRows launches takes: its finite-window
// rings hold ⌈w⌉ + kDecodeRows − 1 slots (kernels/cuda/screening_decode.h), so that a
// chunk's new keys spare the ones its first row reads.
inline constexpr int64_t kDecodeRows = 64;

// One layer's screening units: Multiscreen's tiles, or the heads of a Transformer with
// attention SCREENING. Shape: the layer's ScreeningShape (tiles, d_k, d_v, w_th and the
// switches tanh_norm, position, output_gate, rope_scaling; batch, seq and pos0 unused).
template <typename Real>
class ScreeningCache {
 public:
  virtual ~ScreeningCache() = default;
  // The token at absolute position `pos`. P: [tiles · p_cols()] (device), each unit's raw
  // projections [q | k | v | g]. Normalizes them (spec step 5), turns q̄ and k̄ at `pos`
  // (step 6: MiPE at the unit's rate, or RoPE with rope_scaling), caches k̃ and v̄, and
  // writes U [tiles · d_v] (device) = scale · TanhNorm(h) ⊙ tanh(SiLU(g)) with
  //   h = Σ_j Trim(q̃·k̃_j)² m(pos − j) v̄_j
  // over the unit's cached keys, this token's included (steps 7–13; the shape's switches
  // as in ScreeningForward). The same sums as the batched forward's last row.
  virtual void Step(const Real* P, int64_t pos, Real* U) = 0;
  // `rows` tokens at positions pos0 … pos0 + rows − 1, in order: P [rows, ldp] and U
  // [rows, ldu] (device) rows as Step's. The results of `rows` Steps, bit for bit (a
  // decoder's prompt chunk): an implementation may take the units in parallel (the CPU's)
  // or the rows in fewer launches; by default, Step row by row.
  virtual void StepRows(const Real* P, int64_t ldp, int64_t rows, int64_t pos0, Real* U, int64_t ldu) {
    for (int64_t r = 0; r < rows; ++r) Step(P + r * ldp, pos0 + r, U + r * ldu);
  }
  // Keys unit `tile` holds after `steps` Steps: min(steps, ⌈w⌉), or steps for w = ∞.
  virtual int64_t CachedKeys(int64_t tile, int64_t steps) const = 0;
};

// The Transformer's softmax-family attention of one layer (kernels/cpu/attention.h's
// kinds, not kScreening) with its key-value cache.
struct AttentionCacheShape {
  int64_t heads = 0, d_h = 0;
  AttentionKind kind = AttentionKind::kSoftmax;
  bool qk_norm = false;           // q and k unit per head after RoPE (QKNorm)
  cpu::RopeScaling rope_scaling;  // YaRN's frequencies at inference (plain RoPE by default)
  std::vector<double> scale;      // [heads] host: the score scale c_h (YaRN's logit scale folded in)
  // Sigmoid's n in b = −log n for every position (> 0), or 0 for n = pos + 1 (cpu/attention.h
  // AttentionShape::sigmoid_bias_length).
  int64_t sigmoid_bias_length = 0;
};

template <typename Real>
class AttentionCache {
 public:
  virtual ~AttentionCache() = default;
  // The token at position `pos`. qkv: [3 · heads · d_h] (device), the raw projections
  // [q heads | k heads | v heads]. Turns q and k by RoPE at `pos`, makes them unit with
  // qk_norm, appends k and v to the cache, and writes o [heads · d_h] (device) =
  // Σ_{j ≤ pos} p_j v_j, p the kind's weights of z_j = c_h · λ(pos) · q·k_j (λ: SSMax's
  // log(pos + 1), else 1), scores and sums in fp64.
  virtual void Step(const Real* qkv, int64_t pos, Real* o) = 0;
  // `rows` tokens at positions pos0 … pos0 + rows − 1, in order: qkv [rows, ldqkv] and o
  // [rows, ldo] rows as Step's; the results of `rows` Steps, bit for bit (the CPU's takes
  // the rows' (row, head) pairs in parallel once their keys are cached). By default, Step
  // row by row.
  virtual void StepRows(const Real* qkv, int64_t ldqkv, int64_t rows, int64_t pos0, Real* o, int64_t ldo) {
    for (int64_t r = 0; r < rows; ++r) Step(qkv + r * ldqkv, pos0 + r, o + r * ldo);
  }
};

}  // namespace kernels

// The caches of `device`. tiles: the units' mapped scalars (MapTileScalars with the
// inference window rule), shape.tiles of them. Errors (one line, as MakeKernelTable's):
// CUDA for double, a build without CUDA; shapes the device's kernels do not take.
template <typename Real>
absl::StatusOr<std::unique_ptr<kernels::ScreeningCache<Real>>> MakeScreeningCache(
    Device device, const kernels::ScreeningShape& shape, const std::vector<kernels::TileScalars>& tiles);
template <typename Real>
absl::StatusOr<std::unique_ptr<kernels::AttentionCache<Real>>> MakeAttentionCache(
    Device device, const kernels::AttentionCacheShape& shape);

}  // namespace multiscreen
