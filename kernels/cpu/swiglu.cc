#include "kernels/cpu/swiglu.h"

#include <cmath>

namespace multiscreen::kernels::cpu {

template <typename Real>
void SwiGluForward(const Real* gu, Real* h, int64_t rows, int64_t f) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const Real* a = gu + r * 2 * f;
    const Real* u = a + f;
    for (int64_t c = 0; c < f; ++c) {
      const Real sig = Real(1) / (Real(1) + std::exp(-a[c]));
      h[r * f + c] = a[c] * sig * u[c];
    }
  }
}

template <typename Real>
void SwiGluBackward(const Real* gu, const Real* dh, Real* dgu, int64_t rows, int64_t f) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const Real* a = gu + r * 2 * f;
    const Real* u = a + f;
    Real* da = dgu + r * 2 * f;
    Real* du = da + f;
    for (int64_t c = 0; c < f; ++c) {
      const Real sig = Real(1) / (Real(1) + std::exp(-a[c]));
      const Real g = dh[r * f + c];
      du[c] = g * a[c] * sig;
      da[c] = g * u[c] * sig * (Real(1) + a[c] * (Real(1) - sig));
    }
  }
}

template void SwiGluForward<float>(const float*, float*, int64_t, int64_t);
template void SwiGluForward<double>(const double*, double*, int64_t, int64_t);
template void SwiGluBackward<float>(const float*, const float*, float*, int64_t, int64_t);
template void SwiGluBackward<double>(const double*, const double*, double*, int64_t, int64_t);

}  // namespace multiscreen::kernels::cpu
