// SwiGLU (spec "Transformer baseline"): h = SiLU(a) ⊙ u with SiLU(a) = a·σ(a), where
// a and u are the gate and up projections of the normed input.
#pragma once

#include <cstdint>

namespace multiscreen::kernels::cpu {

// gu: [rows, 2f], row r = [a_r (f values) | u_r (f values)], read.  h: [rows, f] written.
template <typename Real>
void SwiGluForward(const Real* gu, Real* h, int64_t rows, int64_t f);

// dgu = [da | du] [rows, 2f] written from dh [rows, f]:
//   du = dh · SiLU(a),  da = dh · u · σ(a)(1 + a(1 − σ(a))).
template <typename Real>
void SwiGluBackward(const Real* gu, const Real* dh, Real* dgu, int64_t rows, int64_t f);

}  // namespace multiscreen::kernels::cpu
