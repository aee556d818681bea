#include "kernels/cpu/screening_cache.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/mipe.h"
#include "kernels/cpu/screening.h"
#include "kernels/cpu/softmask.h"
#include "kernels/cpu/unit_rows.h"

namespace multiscreen::kernels::cpu {

template <typename Real>
ScreeningTileCache<Real>::ScreeningTileCache(const TileScalars& scalars, int64_t d_k, int64_t d_v)
    : scalars_(scalars), d_k_(d_k), d_v_(d_v), q_(d_k) {
  if (std::isinf(scalars_.w)) return;
  capacity_ = static_cast<int64_t>(std::ceil(scalars_.w));
  k_.resize(capacity_ * d_k);
  v_.resize(capacity_ * d_v);
  position_.assign(capacity_, -1);
  mask_.resize(capacity_);
  std::vector<Real> unused(capacity_);
  SoftmaskTable(scalars_.w, capacity_, mask_.data(), unused.data());
}

template <typename Real>
int64_t ScreeningTileCache<Real>::CachedKeys(int64_t steps) const {
  return capacity_ == 0 ? static_cast<int64_t>(position_.size()) : std::min(steps, capacity_);
}

template <typename Real>
void ScreeningTileCache<Real>::Step(const Real* q, const Real* key, const Real* v, int64_t pos,
                                    PositionKind position, double w_th,
                                    const RopeScaling& rope_scaling, Real* h) {
  int64_t slot;
  if (capacity_ == 0) {
    slot = static_cast<int64_t>(position_.size());
    position_.push_back(pos);
    k_.resize((slot + 1) * d_k_);
    v_.resize((slot + 1) * d_v_);
  } else {
    slot = pos % capacity_;
    position_[slot] = pos;
  }
  double rate, rate_dw;
  MipeRate(scalars_.mipe_w, w_th, &rate, &rate_dw);
  Real norm;
  UnitRowsForward(q, d_k_, q_.data(), d_k_, &norm, 1, d_k_);
  PositionRotateForward(position, q_.data(), d_k_, 1, d_k_, pos, rate, rope_scaling);
  UnitRowsForward(key, d_k_, k_.data() + slot * d_k_, d_k_, &norm, 1, d_k_);
  PositionRotateForward(position, k_.data() + slot * d_k_, d_k_, 1, d_k_, pos, rate, rope_scaling);
  UnitRowsForward(v, d_v_, v_.data() + slot * d_v_, d_v_, &norm, 1, d_v_);
  const int64_t n = static_cast<int64_t>(position_.size());
  dist_.resize(n);
  for (int64_t j = 0; j < n; ++j) dist_[j] = position_[j] < 0 ? -1 : pos - position_[j];
  ScreenOneQuery(q_.data(), k_.data(), v_.data(), dist_.data(), n, d_k_, d_v_, static_cast<Real>(scalars_.r),
                    capacity_ == 0 ? static_cast<const Real*>(nullptr) : mask_.data(), capacity_, h);
}

template <typename Real>
CpuScreeningCache<Real>::CpuScreeningCache(const ScreeningShape& shape, const std::vector<TileScalars>& tiles)
    : shape_(shape) {
  for (const TileScalars& t : tiles) units_.emplace_back(t, shape.d_k, shape.d_v);
}

template <typename Real>
void CpuScreeningCache<Real>::StepUnit(size_t t, const Real* P, int64_t pos, Real* h, Real* U) {
  const int64_t dK = shape_.d_k, dV = shape_.d_v, C = shape_.p_cols();
  ScreeningTileCache<Real>& c = units_[t];
  const Real* p = P + t * C;  // [q | k | v | g] of unit t
  c.Step(p, p + dK, p + 2 * dK, pos, shape_.position, shape_.w_th, shape_.rope_scaling, h);
  TileOutputRow(h, shape_.output_gate ? p + 2 * dK + dV : nullptr, static_cast<Real>(c.scalars().scale), dV,
                shape_.tanh_norm, U + t * dV);
}

template <typename Real>
void CpuScreeningCache<Real>::Step(const Real* P, int64_t pos, Real* U) {
  const int64_t units = static_cast<int64_t>(units_.size());
  StepRows(P, units * shape_.p_cols(), 1, pos, U, units * shape_.d_v);
}

template <typename Real>
void CpuScreeningCache<Real>::StepRows(const Real* P, int64_t ldp, int64_t rows, int64_t pos0, Real* U,
                                       int64_t ldu) {
  // Each unit's cache is its own: units in parallel, each unit's rows in order (the same
  // operations whatever rows is, so the same bits as Step's single rows).
  const int64_t units = static_cast<int64_t>(units_.size());
#pragma omp parallel if (rows > 1)
  {
    std::vector<Real> h(shape_.d_v);
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < units; ++t) {
      for (int64_t r = 0; r < rows; ++r) StepUnit(static_cast<size_t>(t), P + r * ldp, pos0 + r, h.data(), U + r * ldu);
    }
  }
}

template class ScreeningTileCache<float>;
template class ScreeningTileCache<double>;
template class CpuScreeningCache<float>;
template class CpuScreeningCache<double>;

}  // namespace multiscreen::kernels::cpu
