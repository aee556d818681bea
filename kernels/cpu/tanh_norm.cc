#include "kernels/cpu/tanh_norm.h"

#include <cmath>

namespace multiscreen::kernels::cpu {

template <typename Real>
void TanhNormScale(Real n, Real* f, Real* g) {
  if (n < Real(kTanhNormSeriesBelow)) {
    // tanh(n)/n = 1 − n²/3 + 2n⁴/15 − 17n⁶/315 + 62n⁸/2835 − …
    const Real n2 = n * n;
    *f = Real(1) + n2 * (Real(-1.0 / 3) + n2 * (Real(2.0 / 15) + n2 * (Real(-17.0 / 315) + n2 * Real(62.0 / 2835))));
    // f'(n)/n = −2/3 + 8n²/15 − 102n⁴/315 + 496n⁶/2835 − …
    *g = Real(-2.0 / 3) + n2 * (Real(8.0 / 15) + n2 * (Real(-102.0 / 315) + n2 * Real(496.0 / 2835)));
    return;
  }
  const Real t = std::tanh(n);
  *f = t / n;
  *g = (n * (Real(1) - t * t) - t) / (n * n * n);
}

template <typename Real>
void TanhNormForward(const Real* h, Real* u, int64_t rows, int64_t d) {
  for (int64_t r = 0; r < rows; ++r) {
    const Real* hr = h + r * d;
    Real sq = 0;
    for (int64_t c = 0; c < d; ++c) sq += hr[c] * hr[c];
    Real f, g;
    TanhNormScale(std::sqrt(sq), &f, &g);
    Real* ur = u + r * d;
    for (int64_t c = 0; c < d; ++c) ur[c] = hr[c] * f;
  }
}

template <typename Real>
void TanhNormBackward(const Real* h, const Real* du, Real* dh, int64_t rows, int64_t d) {
  for (int64_t r = 0; r < rows; ++r) {
    const Real* hr = h + r * d;
    const Real* dur = du + r * d;
    Real sq = 0, dot = 0;
    for (int64_t c = 0; c < d; ++c) {
      sq += hr[c] * hr[c];
      dot += hr[c] * dur[c];
    }
    Real f, g;
    TanhNormScale(std::sqrt(sq), &f, &g);
    Real* dhr = dh + r * d;
    for (int64_t c = 0; c < d; ++c) dhr[c] = f * dur[c] + g * dot * hr[c];
  }
}

template void TanhNormScale<float>(float, float*, float*);
template void TanhNormScale<double>(double, double*, double*);
template void TanhNormForward<float>(const float*, float*, int64_t, int64_t);
template void TanhNormForward<double>(const double*, double*, int64_t, int64_t);
template void TanhNormBackward<float>(const float*, const float*, float*, int64_t, int64_t);
template void TanhNormBackward<double>(const double*, const double*, double*, int64_t, int64_t);

}  // namespace multiscreen::kernels::cpu
