#include "kernels/cpu/rope.h"

#include <cmath>
#include <vector>

namespace multiscreen::kernels::cpu {

template <typename Real>
void Rope(Real* x, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t d_h, bool inverse, int64_t pos0) {
  const int64_t half = d_h / 2;
  std::vector<double> freq(half);
  for (int64_t p = 0; p < half; ++p) freq[p] = std::pow(kRopeTheta, -2.0 * double(p) / double(d_h));
  const double sign = inverse ? -1.0 : 1.0;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t p = 0; p < half; ++p) {
      const double phi = double(pos0 + t) * freq[p];
      const Real c = static_cast<Real>(std::cos(phi)), s = static_cast<Real>(sign * std::sin(phi));
      for (int64_t b = 0; b < B; ++b) {
        Real* row = x + (b * T + t) * ld;
        for (int64_t h = 0; h < heads; ++h) {
          Real* z = row + h * d_h;
          const Real a = z[p], bb = z[p + half];
          z[p] = a * c - bb * s;
          z[p + half] = a * s + bb * c;
        }
      }
    }
  }
}

template void Rope<float>(float*, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int64_t);
template void Rope<double>(double*, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int64_t);

}  // namespace multiscreen::kernels::cpu
