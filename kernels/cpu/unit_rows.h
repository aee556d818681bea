// Row-wise unit normalization y = x / max(‖x‖, floor), and its backward.
// Used for q̄, k̄, v̄ (spec step 5), the normalized embedding Ē (step 1) and
// PLNorm (step 14).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace multiscreen::kernels::cpu {

// The norm floor of spec step 5 (1e-12 in fp32; the same value in fp64).
inline constexpr double kUnitNormFloor = 1e-12;

// One row: y = x / max(‖x‖, kUnitNormFloor) over d values (D > 0: d as a compile-time
// constant, for callers' hot loops); returns ‖x‖. y may alias x.
template <typename Real, int D = 0>
__attribute__((always_inline)) inline Real UnitRow(const Real* x, Real* y, int64_t d_rt) {
  const int64_t d = D > 0 ? D : d_rt;
  Real sq = 0;
#pragma omp simd reduction(+ : sq)
  for (int64_t c = 0; c < d; ++c) sq += x[c] * x[c];
  const Real n = std::sqrt(sq);
  const Real inv = Real(1) / std::max(n, Real(kUnitNormFloor));
#pragma omp simd
  for (int64_t c = 0; c < d; ++c) y[c] = x[c] * inv;
  return n;
}

// y[r, :] = x[r, :] / max(‖x[r, :]‖, kUnitNormFloor); norm[r] = ‖x[r, :]‖.
//   x: rows of d values with row stride ldx; y: row stride ldy (may alias x);
//   norm: [rows] written (may be null).
template <typename Real>
void UnitRowsForward(const Real* x, int64_t ldx, Real* y, int64_t ldy, Real* norm, int64_t rows,
                     int64_t d);

// Backward of UnitRowsForward given its output y and the stored norms:
//   dx = (dy − y (y·dy)) / ‖x‖, or dy / floor where ‖x‖ ≤ floor.
// dx is written when !accumulate, added to otherwise. dx may alias dy.
template <typename Real>
void UnitRowsBackward(const Real* y, int64_t ldy, const Real* norm, const Real* dy, int64_t lddy,
                      Real* dx, int64_t lddx, int64_t rows, int64_t d, bool accumulate);

}  // namespace multiscreen::kernels::cpu
