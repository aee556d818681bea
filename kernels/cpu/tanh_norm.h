// TanhNorm (spec step 11): u = h · tanh(‖h‖)/‖h‖, row-wise, so ‖u‖ < 1.
#pragma once

#include <cstdint>

namespace multiscreen::kernels::cpu {

// Below this norm the scale f(n) = tanh(n)/n and f'(n)/n use their Taylor series
// (to n⁸ and n⁶), which avoids the cancellation of the closed forms near zero.
inline constexpr double kTanhNormSeriesBelow = 0.1;

// f(n) = tanh(n)/n and g(n) = f'(n)/n (both smooth and even in n).
template <typename Real>
void TanhNormScale(Real n, Real* f, Real* g);

// u[r, :] = h[r, :] · tanh(‖h[r, :]‖)/‖h[r, :]‖.
//   h: [rows, d] fp32/fp64, read.   u: [rows, d] written (may alias h).
// Zero rows stay zero.
template <typename Real>
void TanhNormForward(const Real* h, Real* u, int64_t rows, int64_t d);

// Backward: dh = f(n) du + h (h·du) f'(n)/n, n = ‖h‖.
//   h: [rows, d] the forward input;  du: [rows, d];  dh: [rows, d] written.
template <typename Real>
void TanhNormBackward(const Real* h, const Real* du, Real* dh, int64_t rows, int64_t d);

}  // namespace multiscreen::kernels::cpu
