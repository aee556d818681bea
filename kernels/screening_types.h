// The types every screening kernel shares, whatever its device (kernels/cpu/screening.h,
// kernels/cuda/screening.h, kernels/kernel_table.h): the shape of one layer call, a
// tile's mapped scalars and their gradients, and what the forward saves for the
// backward (spec steps 5–13).
#pragma once

#include <cstdint>

namespace multiscreen::kernels {

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
  // Columns per tile in P: [q (d_k) | k (d_k) | v (d_v) | g (d_v)].
  int64_t p_cols() const { return 2 * d_k + 2 * d_v; }
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
};

}  // namespace multiscreen::kernels
