#include "kernels/cpu/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

namespace multiscreen::kernels::cpu {

void YarnCodeRampBounds(int64_t d_h, const RopeScaling& s, double* lo, double* hi) {
  // The pair index that turns `turns` times over L; the bounds rounded outward.
  auto pair_turning = [&](double turns) {
    return double(d_h) * std::log(s.original_len / (turns * 2.0 * std::numbers::pi)) / (2.0 * std::log(kRopeTheta));
  };
  *lo = std::max(std::floor(pair_turning(s.beta)), 0.0);
  *hi = std::min(std::ceil(pair_turning(s.alpha)), double(d_h - 1));
  if (*lo == *hi) *hi += 0.001;  // as the reference, against a zero width
}

double RopeFrequency(int64_t p, int64_t d_h, const RopeScaling& scaling) {
  const double theta = std::pow(kRopeTheta, -2.0 * double(p) / double(d_h));
  if (!scaling.active()) return theta;
  double gamma;
  if (scaling.ramp == YarnRamp::kCode) {
    double lo, hi;
    YarnCodeRampBounds(d_h, scaling, &lo, &hi);
    gamma = 1.0 - std::clamp((double(p) - lo) / (hi - lo), 0.0, 1.0);
  } else {
    const double wavelength = 2.0 * std::numbers::pi / theta;
    const double r = scaling.original_len / wavelength;
    gamma = std::clamp((r - scaling.alpha) / (scaling.beta - scaling.alpha), 0.0, 1.0);
  }
  return (1.0 - gamma) * theta / scaling.factor + gamma * theta;
}

void RopeFrequencies(int64_t d_h, const RopeScaling& scaling, double* freq) {
  for (int64_t p = 0; p < d_h / 2; ++p) freq[p] = RopeFrequency(p, d_h, scaling);
}

double YarnLogitScale(double factor) {
  if (factor == 1.0) return 1.0;
  const double m = 0.1 * std::log(factor) + 1.0;
  return m * m;
}

template <typename Real>
void Rope(Real* x, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t d_h, bool inverse, int64_t pos0,
          const RopeScaling& scaling) {
  const int64_t half = d_h / 2;
  std::vector<double> freq(half);
  RopeFrequencies(d_h, scaling, freq.data());
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

template void Rope<float>(float*, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int64_t, const RopeScaling&);
template void Rope<double>(double*, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int64_t, const RopeScaling&);

}  // namespace multiscreen::kernels::cpu
