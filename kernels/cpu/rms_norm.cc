#include "kernels/cpu/rms_norm.h"

#include <cmath>
#include <vector>

namespace multiscreen::kernels::cpu {

template <typename Real>
void RmsNormForward(const Real* x, const Real* gain, Real* y, Real* rstd, int64_t rows, int64_t d) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const Real* xr = x + r * d;
    Real* yr = y + r * d;
    double sq = 0;
    for (int64_t c = 0; c < d; ++c) sq += double(xr[c]) * double(xr[c]);
    const Real s = static_cast<Real>(1.0 / std::sqrt(sq / double(d) + kRmsNormEps));
    rstd[r] = s;
    if (gain != nullptr) {
      for (int64_t c = 0; c < d; ++c) yr[c] = xr[c] * s * gain[c];
    } else {
      for (int64_t c = 0; c < d; ++c) yr[c] = xr[c] * s;
    }
  }
}

template <typename Real>
void RmsNormBackward(const Real* x, const Real* gain, const Real* rstd, const Real* dy, Real* dx, Real* dgain,
                     int64_t rows, int64_t d, bool accumulate) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const Real* xr = x + r * d;
    const Real* dyr = dy + r * d;
    Real* dxr = dx + r * d;
    const Real s = rstd[r];
    double dot = 0;  // Σ_c ĝ_c x̂_c
    for (int64_t c = 0; c < d; ++c) dot += double(dyr[c] * (gain != nullptr ? gain[c] : Real(1))) * double(xr[c] * s);
    const Real mean = static_cast<Real>(dot / double(d));
    for (int64_t c = 0; c < d; ++c) {
      const Real g = dyr[c] * (gain != nullptr ? gain[c] : Real(1));
      const Real v = s * (g - xr[c] * s * mean);
      dxr[c] = accumulate ? dxr[c] + v : v;
    }
  }
  if (gain == nullptr || dgain == nullptr) return;
  // The gain's gradient sums over rows: in one fixed order (deterministic), fp64.
  std::vector<double> acc(d, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const Real s = rstd[r];
    for (int64_t c = 0; c < d; ++c) acc[c] += double(dy[r * d + c]) * double(x[r * d + c] * s);
  }
  for (int64_t c = 0; c < d; ++c) dgain[c] += static_cast<Real>(acc[c]);
}

template void RmsNormForward<float>(const float*, const float*, float*, float*, int64_t, int64_t);
template void RmsNormForward<double>(const double*, const double*, double*, double*, int64_t, int64_t);
template void RmsNormBackward<float>(const float*, const float*, const float*, const float*, float*, float*, int64_t,
                                     int64_t, bool);
template void RmsNormBackward<double>(const double*, const double*, const double*, const double*, double*, double*,
                                      int64_t, int64_t, bool);

}  // namespace multiscreen::kernels::cpu
