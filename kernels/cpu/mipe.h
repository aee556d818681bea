// MiPE, minimal positional encoding (spec step 6): rotate coordinates (0, 1) of
// q̄_i and k̄_i by φ_i = π · i · γ(w)/w, with γ(w) = ½(cos(π w/w_th) + 1) below
// w_th and 0 above. Angles are computed in fp64 whatever Real is (the spec
// forbids low precision here: it breaks causality at long positions).
#pragma once

#include <cstdint>

namespace multiscreen::kernels::cpu {

// c(w) = π γ(w)/w, the angle per position (φ_i = i · c(w)), and dc/dw.
// Infinite w gives 0 and 0.
void MipeRate(double w, double w_th, double* rate, double* rate_dw);

// Rotates coordinates 0 and 1 of each row r (absolute position pos0 + r) by
// φ = (pos0 + r) · rate, in place. z: [rows, ld] (d_K ≥ 2 columns used).
template <typename Real>
void MipeRotateForward(Real* z, int64_t ld, int64_t rows, int64_t pos0, double rate);

// Backward of MipeRotateForward, in place on dz (dz ← Rᵀ dz), given the rotated
// output z̃. Returns Σ_r (dφ_r/d rate) · ∂L/∂φ_r = Σ_r pos_r (dz̃0 · (−z̃1) + dz̃1 · z̃0),
// which the caller multiplies by rate_dw to get the window gradient.
template <typename Real>
double MipeRotateBackward(const Real* z_rot, int64_t ldz, Real* dz, int64_t lddz, int64_t rows,
                          int64_t pos0, double rate);

}  // namespace multiscreen::kernels::cpu
