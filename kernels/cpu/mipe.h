// MiPE, minimal positional encoding (spec step 6): rotate coordinates (0, 1) of
// q̄_i and k̄_i by φ_i = π · i · γ(w)/w, with γ(w) = ½(cos(π w/w_th) + 1) below
// w_th and 0 above. Angles are computed in fp64 whatever Real is (the spec
// forbids low precision here: it breaks causality at long positions).
#pragma once

#include <cstdint>

#include "kernels/cpu/rope.h"
#include "kernels/screening_types.h"

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

// ---- The ablation's alternatives (position: NOPE | ROPE; issue 30, the paper's Figs. 21–22) --

// RoPE on a screening tile (PositionKind::kRope): all d_K coordinates of the unit q̄, k̄
// turned in the half-split pairing (p, p + d_K/2), p < d_K/2, by φ(t, p) = t · θ_p with
// θ_p = 10000^(−2p/d_K) (Su et al. 2021, "RoFormer"; the pairing, base and frequencies of
// the Transformer baseline, kernels/cpu/rope.h RopeFrequency, so the two families' RoPE
// agree), at absolute position t, independent of the tile's w. d_k even (ResolveModel
// checks). At inference `scaling` may give YaRN's NTK-by-parts frequencies θ'_p (F > 1;
// issue 30, docs/ablations.md) — only the frequencies: screening has no temperature
// (its similarity is a cosine compared with Trim's absolute threshold 1 − r).

// cos and sin of φ(pos0 + r, p) = (pos0 + r) · θ'_p in fp64: table [rows, d_k/2, 2]
// (resized by the caller to rows · d_k). The default scaling is plain RoPE.
void ScreeningRopeTable(int64_t rows, int64_t d_k, int64_t pos0, double* table, const RopeScaling& scaling = {});

// Turns each row of z [rows, ld] (d_k columns) by its row of `table` (ScreeningRopeTable):
// (a, b) ← (a cos φ − b sin φ, a sin φ + b cos φ) for (a, b) = (z_p, z_{p+d_k/2});
// `inverse`: the transpose (the backward, or undoing the turn), φ → −φ.
template <typename Real>
void RopeRotateRows(Real* z, int64_t ld, int64_t rows, int64_t d_k, const double* table, bool inverse = false);

// Spec step 6 as the position switch says, on rows at absolute positions pos0 + r of
// z [rows, ld] (d_k columns): MiPE with `mipe_rate` (MipeRate), nothing, or RoPE with
// `rope_scaling` (ScreeningRopeTable; read for kRope only).
// The decoding path's form (the fused kernels inline their own).
template <typename Real>
void PositionRotateForward(PositionKind kind, Real* z, int64_t ld, int64_t rows, int64_t d_k, int64_t pos0,
                           double mipe_rate, const RopeScaling& rope_scaling = {});

}  // namespace multiscreen::kernels::cpu
