#include "model/screening_cache.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/mipe.h"
#include "kernels/cpu/screening.h"
#include "kernels/cpu/softmask.h"
#include "kernels/cpu/unit_rows.h"

namespace multiscreen {

namespace k = kernels::cpu;

template <typename Real>
ScreeningTileCache<Real>::ScreeningTileCache(const kernels::TileScalars& scalars, int64_t d_k, int64_t d_v)
    : scalars_(scalars), d_k_(d_k), d_v_(d_v), q_(d_k) {
  if (std::isinf(scalars_.w)) return;
  capacity_ = static_cast<int64_t>(std::ceil(scalars_.w));
  k_.resize(capacity_ * d_k);
  v_.resize(capacity_ * d_v);
  position_.assign(capacity_, -1);
  mask_.resize(capacity_);
  std::vector<Real> unused(capacity_);
  k::SoftmaskTable(scalars_.w, capacity_, mask_.data(), unused.data());
}

template <typename Real>
int64_t ScreeningTileCache<Real>::CachedKeys(int64_t steps) const {
  return capacity_ == 0 ? static_cast<int64_t>(position_.size()) : std::min(steps, capacity_);
}

template <typename Real>
void ScreeningTileCache<Real>::Step(const Real* q, const Real* key, const Real* v, int64_t pos,
                                    kernels::PositionKind position, double w_th,
                                    const k::RopeScaling& rope_scaling, Real* h) {
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
  k::MipeRate(scalars_.mipe_w, w_th, &rate, &rate_dw);
  Real norm;
  k::UnitRowsForward(q, d_k_, q_.data(), d_k_, &norm, 1, d_k_);
  k::PositionRotateForward(position, q_.data(), d_k_, 1, d_k_, pos, rate, rope_scaling);
  k::UnitRowsForward(key, d_k_, k_.data() + slot * d_k_, d_k_, &norm, 1, d_k_);
  k::PositionRotateForward(position, k_.data() + slot * d_k_, d_k_, 1, d_k_, pos, rate, rope_scaling);
  k::UnitRowsForward(v, d_v_, v_.data() + slot * d_v_, d_v_, &norm, 1, d_v_);
  const int64_t n = static_cast<int64_t>(position_.size());
  dist_.resize(n);
  for (int64_t j = 0; j < n; ++j) dist_[j] = position_[j] < 0 ? -1 : pos - position_[j];
  k::ScreenOneQuery(q_.data(), k_.data(), v_.data(), dist_.data(), n, d_k_, d_v_, static_cast<Real>(scalars_.r),
                    capacity_ == 0 ? static_cast<const Real*>(nullptr) : mask_.data(), capacity_, h);
}

template class ScreeningTileCache<float>;
template class ScreeningTileCache<double>;

}  // namespace multiscreen
