// The types every screening kernel shares, whatever its device (kernels/cpu/screening.h,
// kernels/cuda/screening.h, kernels/kernel_table.h): the shape of one layer call, a
// tile's mapped scalars and their gradients, and what the forward saves for the
// backward (spec steps 5–13).
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "kernels/cpu/rope.h"

namespace multiscreen::kernels {

// Where positions enter q̃ and k̃ (config.proto ModelConfig.position, issue 30; the
// paper's Figs. 21–22, docs/ablations.md). Values are the proto's.
//  kMipe: spec step 6 (coordinates 0, 1 turned by π γ(w)/w per position);
//  kNope: nothing (only the causal Softmask window knows about distance);
//  kRope: rotary embedding on all d_K coordinates of q̄, k̄ in the half-split pairing
//         (p, p + d_K/2), angle position · 10000^(−2p/d_K), independent of w.
enum class PositionKind { kMipe = 1, kNope = 2, kRope = 3 };

// "mipe", "nope", "rope": the names weights files and manifests record.
inline const char* PositionKindName(PositionKind kind) {
  switch (kind) {
    case PositionKind::kNope: return "nope";
    case PositionKind::kRope: return "rope";
    default: return "mipe";
  }
}

// The kind named `name` (PositionKindName's spelling); false when there is none.
inline bool ParsePositionKind(std::string_view name, PositionKind* kind) {
  for (PositionKind k : {PositionKind::kMipe, PositionKind::kNope, PositionKind::kRope}) {
    if (name == PositionKindName(k)) {
      *kind = k;
      return true;
    }
  }
  return false;
}

// Sizes of one layer call. Rows of P and U are tokens b·T + t.
struct ScreeningShape {
  int64_t batch = 0;  // B sequences
  int64_t seq = 0;    // T tokens per sequence
  int64_t tiles = 0;  // local tiles of the layer
  int64_t d_k = 0;
  int64_t d_v = 0;
  int64_t pos0 = 0;   // absolute position of token 0 (MiPE)
  double w_th = 256;  // MiPE threshold
  bool tanh_norm = true;  // TanhNorm (step 11); false = identity, u = h (ablation switch, issue 18)
  PositionKind position = PositionKind::kMipe;  // step 6 (ablation switch, issue 30)
  bool output_gate = true;  // step 12; false: no gate columns in P, u is not gated (issue 30)
  // Position ROPE at inference: YaRN's NTK-by-parts frequencies θ'_p (kernels/cpu/rope.h,
  // L = the training length, F = factor; docs/ablations.md), and nothing else: no
  // temperature (s_ij stays the cosine Trim compares with 1 − r). The default is plain
  // RoPE. Read for PositionKind::kRope only; training never sets it (YaRN is inference
  // only), and the backward follows it as it follows any fixed rotation.
  cpu::RopeScaling rope_scaling;
  // Columns per tile in P: [q (d_k) | k (d_k) | v (d_v) | g (d_v)], without g when the
  // output gate is off.
  int64_t p_cols() const { return 2 * d_k + (output_gate ? 2 : 1) * d_v; }
  // P's elements are bf16 (2 bytes each from P's start, the same row-major layout), as the
  // kernel table's ScreeningProjection wrote them when it returned true; only that table's
  // screening calls read P so. False: fp32 (every table's screening kernels read it).
  bool p_bf16 = false;
};

// One tile's learned scalars, already mapped: w = e^{s_w} + 1 (or +inf when the
// window is expanded at inference), r = σ(s_r), scale = e^{s_O}.
struct TileScalars {
  double w = 1;
  double r = 1;
  double scale = 1;
  double mipe_w = 1;  // the w MiPE uses (the learned one, even when w is expanded)
};

// Per-tile gradients with respect to w, r and scale (sums over the batch).
struct TileScalarGrads {
  double w = 0;
  double r = 0;
  double scale = 0;
};

// The learned scalars' gradients from the kernels' ∂L/∂w, ∂L/∂r, ∂L/∂scale of `tiles`
// [n] (MapTileScalars of a training forward, model/tile_weights.h; spec "Backward-pass
// notes"): ∂L/∂s_w = ∂L/∂w · (w − 1), ∂L/∂s_r = ∂L/∂r · r(1 − r), ∂L/∂s_O = ∂L/∂scale ·
// scale, in fp64, then rounded to Real. g_sw, g_sr, g_so: [n] host, written; g_so may be
// null (a screening head of the Transformer has no s_O). A window that overflowed
// (s_w > ~709.78: w = ∞) has the plain causal mask, which does not depend on s_w:
// ∂L/∂s_w is 0 there, the limit of ∂m/∂w · (w − 1) ~ π²d²/(2w²) (the kernels give
// ∂L/∂w = 0 and the product would be 0 · ∞ = NaN). The CUDA backward's device twin is
// TileScalarParamGradsKernel (kernels/cuda/screening.cu), the same operations.
template <typename Real>
void TileScalarParamGrads(const TileScalars* tiles, const TileScalarGrads* grads, int64_t n, Real* g_sw, Real* g_sr,
                          Real* g_so) {
  for (int64_t t = 0; t < n; ++t) {
    g_sw[t] = std::isinf(tiles[t].w) ? Real(0) : static_cast<Real>(grads[t].w * (tiles[t].w - 1.0));
    g_sr[t] = static_cast<Real>(grads[t].r * tiles[t].r * (1.0 - tiles[t].r));
    if (g_so != nullptr) g_so[t] = static_cast<Real>(grads[t].scale * tiles[t].scale);
  }
}

// What the forward keeps for the backward, per (b, tile) in [B, tiles, T, ·]:
// q̃ and k̃ (unit length, rotated by MiPE), v̄, the norms of q, k, v, and the
// aggregate h before TanhNorm.
template <typename Real>
struct ScreeningSaved {
  Real* q_tilde = nullptr;  // [B, tiles, T, d_k]
  Real* k_tilde = nullptr;  // [B, tiles, T, d_k]
  Real* v_bar = nullptr;    // [B, tiles, T, d_v]
  Real* q_norm = nullptr;   // [B, tiles, T]
  Real* k_norm = nullptr;
  Real* v_norm = nullptr;
  Real* h = nullptr;        // [B, tiles, T, d_v]
  // Optional, read by the CPU kernels only (kernels/cpu/screening.h; the CUDA kernels
  // ignore it): [B, tiles, T, 2·d_v], per token the gate ĝ = tanh(SiLU(g)) (d_v values)
  // then dĝ/dg (d_v), written by the forward so that the backward does not compute them
  // again (spec step 12). Null: the backward computes them from g in P. Unused when
  // ScreeningShape::output_gate is false.
  Real* gate = nullptr;
};

}  // namespace multiscreen::kernels
