#include "kernels/cpu/unit_rows.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/simd.h"

namespace multiscreen::kernels::cpu {
namespace {

// Rows per task when a call is split over threads (the vocabulary-sized calls).
constexpr int64_t kRowsPerTask = 1024;

// Rows [r0, r1), a body per instruction-set path (isa.h).
template <typename Real>
struct ForwardRows {
  template <typename Target>
  MS_ALWAYS_INLINE static void Run(const Real* x, int64_t ldx, Real* y, int64_t ldy, Real* norm, int64_t r0,
                                   int64_t r1, int64_t d) {
    for (int64_t r = r0; r < r1; ++r) {
      const Real n = UnitRow(x + r * ldx, y + r * ldy, d);
      if (norm != nullptr) norm[r] = n;
    }
  }
};

template <typename Real>
struct BackwardRows {
  template <typename Target>
  MS_ALWAYS_INLINE static void Run(const Real* y, int64_t ldy, const Real* norm, const Real* dy, int64_t lddy,
                                   Real* dx, int64_t lddx, int64_t r0, int64_t r1, int64_t d, bool accumulate) {
    for (int64_t r = r0; r < r1; ++r) {
      const Real* yr = y + r * ldy;
      const Real* dyr = dy + r * lddy;
      Real* dxr = dx + r * lddx;
      const bool clamped = !(norm[r] > Real(kUnitNormFloor));
      const Real inv = Real(1) / (clamped ? Real(kUnitNormFloor) : norm[r]);
      Real dot = 0;
      if (!clamped) {
#pragma omp simd reduction(+ : dot)
        for (int64_t c = 0; c < d; ++c) dot += yr[c] * dyr[c];
      }
      if (accumulate) {
#pragma omp simd
        for (int64_t c = 0; c < d; ++c) dxr[c] += (dyr[c] - yr[c] * dot) * inv;
      } else {
#pragma omp simd
        for (int64_t c = 0; c < d; ++c) dxr[c] = (dyr[c] - yr[c] * dot) * inv;
      }
    }
  }
};

}  // namespace

template <typename Real>
void UnitRowsForward(const Real* x, int64_t ldx, Real* y, int64_t ldy, Real* norm, int64_t rows, int64_t d) {
#pragma omp parallel for schedule(static) if (rows > kRowsPerTask)
  for (int64_t r0 = 0; r0 < rows; r0 += kRowsPerTask) {
    IsaDispatch<ForwardRows<Real>>(x, ldx, y, ldy, norm, r0, std::min(rows, r0 + kRowsPerTask), d);
  }
}

template <typename Real>
void UnitRowsBackward(const Real* y, int64_t ldy, const Real* norm, const Real* dy, int64_t lddy,
                      Real* dx, int64_t lddx, int64_t rows, int64_t d, bool accumulate) {
#pragma omp parallel for schedule(static) if (rows > kRowsPerTask)
  for (int64_t r0 = 0; r0 < rows; r0 += kRowsPerTask) {
    IsaDispatch<BackwardRows<Real>>(y, ldy, norm, dy, lddy, dx, lddx, r0, std::min(rows, r0 + kRowsPerTask), d, accumulate);
  }
}

template void UnitRowsForward<float>(const float*, int64_t, float*, int64_t, float*, int64_t, int64_t);
template void UnitRowsForward<double>(const double*, int64_t, double*, int64_t, double*, int64_t, int64_t);
template void UnitRowsBackward<float>(const float*, int64_t, const float*, const float*, int64_t, float*,
                                      int64_t, int64_t, int64_t, bool);
template void UnitRowsBackward<double>(const double*, int64_t, const double*, const double*, int64_t,
                                       double*, int64_t, int64_t, int64_t, bool);

}  // namespace multiscreen::kernels::cpu
