#include "kernels/cpu/mipe.h"

#include <cmath>
#include <numbers>
#include <vector>

namespace multiscreen::kernels::cpu {

void MipeRate(double w, double w_th, double* rate, double* rate_dw) {
  if (!(w < w_th) || std::isinf(w)) {
    *rate = 0;
    *rate_dw = 0;
    return;
  }
  const double pi = std::numbers::pi;
  const double gamma = 0.5 * (std::cos(pi * w / w_th) + 1.0);
  const double gamma_dw = -(pi / (2.0 * w_th)) * std::sin(pi * w / w_th);
  *rate = pi * gamma / w;
  *rate_dw = pi * (gamma_dw * w - gamma) / (w * w);
}

template <typename Real>
void MipeRotateForward(Real* z, int64_t ld, int64_t rows, int64_t pos0, double rate) {
  if (rate == 0) return;
  for (int64_t r = 0; r < rows; ++r) {
    const double phi = static_cast<double>(pos0 + r) * rate;
    const double c = std::cos(phi), s = std::sin(phi);
    Real* zr = z + r * ld;
    const double z0 = zr[0], z1 = zr[1];
    zr[0] = static_cast<Real>(z0 * c - z1 * s);
    zr[1] = static_cast<Real>(z0 * s + z1 * c);
  }
}

template <typename Real>
double MipeRotateBackward(const Real* z_rot, int64_t ldz, Real* dz, int64_t lddz, int64_t rows,
                          int64_t pos0, double rate) {
  double d_rate = 0;
  if (rate == 0) {
    // The angle is 0 but its derivative with respect to the rate is not.
    for (int64_t r = 0; r < rows; ++r) {
      const Real* zr = z_rot + r * ldz;
      const Real* dzr = dz + r * lddz;
      d_rate += static_cast<double>(pos0 + r) * (-double(dzr[0]) * zr[1] + double(dzr[1]) * zr[0]);
    }
    return d_rate;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const double pos = static_cast<double>(pos0 + r);
    const double phi = pos * rate;
    const double c = std::cos(phi), s = std::sin(phi);
    const Real* zr = z_rot + r * ldz;
    Real* dzr = dz + r * lddz;
    const double g0 = dzr[0], g1 = dzr[1];
    d_rate += pos * (-g0 * zr[1] + g1 * zr[0]);
    dzr[0] = static_cast<Real>(g0 * c + g1 * s);
    dzr[1] = static_cast<Real>(-g0 * s + g1 * c);
  }
  return d_rate;
}

void ScreeningRopeTable(int64_t rows, int64_t d_k, int64_t pos0, double* table, const RopeScaling& scaling) {
  const int64_t half = d_k / 2;
  for (int64_t p = 0; p < half; ++p) {
    const double theta = RopeFrequency(p, d_k, scaling);
    for (int64_t r = 0; r < rows; ++r) {
      const double phi = static_cast<double>(pos0 + r) * theta;
      table[(r * half + p) * 2] = std::cos(phi);
      table[(r * half + p) * 2 + 1] = std::sin(phi);
    }
  }
}

template <typename Real>
void RopeRotateRows(Real* z, int64_t ld, int64_t rows, int64_t d_k, const double* table, bool inverse) {
  const int64_t half = d_k / 2;
  const double sign = inverse ? -1.0 : 1.0;
  for (int64_t r = 0; r < rows; ++r) {
    Real* zr = z + r * ld;
    const double* cs = table + r * half * 2;
    for (int64_t p = 0; p < half; ++p) {
      const double a = zr[p], b = zr[p + half], c = cs[2 * p], s = sign * cs[2 * p + 1];
      zr[p] = static_cast<Real>(a * c - b * s);
      zr[p + half] = static_cast<Real>(a * s + b * c);
    }
  }
}

template <typename Real>
void PositionRotateForward(PositionKind kind, Real* z, int64_t ld, int64_t rows, int64_t d_k, int64_t pos0,
                           double mipe_rate, const RopeScaling& rope_scaling) {
  switch (kind) {
    case PositionKind::kMipe: MipeRotateForward(z, ld, rows, pos0, mipe_rate); break;
    case PositionKind::kNope: break;
    case PositionKind::kRope: {
      std::vector<double> table(rows * d_k);
      ScreeningRopeTable(rows, d_k, pos0, table.data(), rope_scaling);
      RopeRotateRows(z, ld, rows, d_k, table.data());
      break;
    }
  }
}

#define MS_INSTANTIATE(Real)                                                                          \
  template void RopeRotateRows<Real>(Real*, int64_t, int64_t, int64_t, const double*, bool);          \
  template void PositionRotateForward<Real>(PositionKind, Real*, int64_t, int64_t, int64_t, int64_t, double,    \
                                           const RopeScaling&);
MS_INSTANTIATE(float)
MS_INSTANTIATE(double)
#undef MS_INSTANTIATE

template void MipeRotateForward<float>(float*, int64_t, int64_t, int64_t, double);
template void MipeRotateForward<double>(double*, int64_t, int64_t, int64_t, double);
template double MipeRotateBackward<float>(const float*, int64_t, float*, int64_t, int64_t, int64_t, double);
template double MipeRotateBackward<double>(const double*, int64_t, double*, int64_t, int64_t, int64_t, double);

}  // namespace multiscreen::kernels::cpu
