// Screening (spec steps 5–13), the fused per-layer kernel: from the projections
// P = x·[W_Q|W_K|W_V|W_G] of a layer's local tiles to the gated, scaled tile
// outputs U, and back. Windowed: each query visits only the ⌈w⌉ keys its
// Softmask can reach, pairs rejected by Trim (s ≤ 1 − r) skip the value work,
// and the backward recomputes relevance instead of storing [T, w] maps.
// Threaded over (batch, tile), largest windows first; within a task the
// similarities of a query's window are one vector loop over a transposed copy
// of k̃, and d_K = 16, d_V = 64 are compiled as constants (other widths take a
// generic path). All scratch memory lives in a caller-owned ScreeningWorkspace.
// The ablation switches of ScreeningShape (tanh_norm; position NOPE/ROPE, output_gate off:
// issue 30, docs/ablations.md) are followed forward and backward.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/screening_types.h"

namespace multiscreen::kernels::cpu {

// The call's shape, the tiles' scalars and the saved activations are shared with the
// CUDA twin (kernels/screening_types.h).
using kernels::ScreeningSaved;
using kernels::ScreeningShape;
using kernels::TileScalarGrads;
using kernels::TileScalars;

// Scratch memory of the screening kernels. Sized by the first call and reused,
// so that calls of the same (or smaller) shape allocate nothing. A model keeps
// one; it must not be shared by calls running at the same time. The members
// are the kernels' business.
template <typename Real>
struct ScreeningWorkspace {
  struct Thread {                      // one per OpenMP thread
    std::vector<Real> k_t;             // k̃ transposed, [d_k, T]
    std::vector<Real> s, weight;       // a query's window: similarity, α·m
    std::vector<int32_t> accepted;     // window offsets Trim accepts
    std::vector<Real> dkey, dval;      // ∂L/∂k̃ [T, d_k], ∂L/∂v̄ [T, d_v]
    std::vector<Real> row;             // generic widths: h, ∂h, ∂q̃, gate and its derivative
  };
  std::vector<Thread> threads;
  std::vector<Real> mask, dmask;       // [tiles, mask_ld]: m(d), ∂m/∂w(d) at index keys − 1 − d
  int64_t mask_ld = 0;                 // the most keys of any tile
  std::vector<int64_t> keys;           // [tiles]
  std::vector<double> rate, rate_dw;   // [tiles] MiPE angle per position, and its w-derivative
  std::vector<double> rotation;        // [tiles, T, 2]: cos φ_i, sin φ_i
  std::vector<double> rope;            // position ROPE: [T, d_k/2, 2] cos, sin (ScreeningRopeTable)
  std::vector<int64_t> order;          // tasks b·tiles + t, largest window first
  std::vector<TileScalarGrads> partial;  // [B, tiles]
};

// Forward. P: [B·T, tiles·p_cols()] read. U: [B·T, tiles·d_v] written,
// U = scale · TanhNorm(h) ⊙ tanh(SiLU(g)). `saved` buffers are all written; saved.gate
// (optional) only when it is not null and shape.output_gate: the gate and its derivative,
// so that the backward skips their two exps and two divides per value.
// ws: scratch kept by the caller (null: a temporary one, allocated per call).
template <typename Real>
void ScreeningForward(const ScreeningShape& shape, const Real* P, const TileScalars* tiles,
                      const ScreeningSaved<Real>& saved, Real* U, ScreeningWorkspace<Real>* ws = nullptr);

// Backward. dU: [B·T, tiles·d_v] read; dP: [B·T, tiles·p_cols()] written
// (q, k, v and g columns). grads[tile] receives (=, not +=) the tile's
// gradients with respect to w (through Softmask and MiPE), r and scale,
// accumulated in fp64 in an order that does not depend on the threads.
// saved.gate, when not null, must hold what the forward of the same P wrote there
// (the result is the same as with null, which recomputes the gate from g).
template <typename Real>
void ScreeningBackward(const ScreeningShape& shape, const Real* P, const TileScalars* tiles,
                       const ScreeningSaved<Real>& saved, const Real* dU, Real* dP,
                       TileScalarGrads* grads, ScreeningWorkspace<Real>* ws = nullptr);

// The aggregate of one query (spec steps 7–10) over n keys at distances
// dist[j] ≥ 0 from it: h = Σ_j α_j m(dist_j) v̄_j. h is written. Used by the
// decoding cache; the batched forward computes the same sums.
//   q: [d_k]; k: [n, d_k]; v: [n, d_v]; mask: m(d) for d < mask_len (0 beyond),
//   or null for an infinite window (m = 1 at every distance).
template <typename Real>
void ScreenOneQuery(const Real* q, const Real* k, const Real* v, const int64_t* dist, int64_t n,
                    int64_t d_k, int64_t d_v, Real r, const Real* mask, int64_t mask_len, Real* h);

// One token's tile output (spec steps 11–13): out = scale · TanhNorm(h) ⊙ tanh(SiLU(g)), TanhNorm
// replaced by the identity when tanh_norm is false (ModelDims::tanh_norm, issue 18), and no
// gate factor when g is null (output_gate off, issue 30).
//   h, g (or null), out: [d_v].
template <typename Real>
void TileOutputRow(const Real* h, const Real* g, Real scale, int64_t d_v, bool tanh_norm, Real* out);

}  // namespace multiscreen::kernels::cpu
