#include "trainer/loss_scaler.h"

namespace multiscreen {

DynamicLossScaler::DynamicLossScaler(bool enabled, double initial_scale, int64_t growth_interval,
                                     double growth_factor, double backoff_factor)
    : enabled_(enabled), growth_interval_(growth_interval), growth_factor_(growth_factor),
      backoff_factor_(backoff_factor) {
  state_.scale = initial_scale;
}

bool DynamicLossScaler::Update(bool gradients_finite) {
  if (!enabled_) return gradients_finite;
  if (!gradients_finite) {
    state_.scale *= backoff_factor_;
    state_.good_steps = 0;
    ++state_.skipped;
    return false;
  }
  if (++state_.good_steps >= growth_interval_) {
    state_.scale *= growth_factor_;
    state_.good_steps = 0;
  }
  return true;
}

}  // namespace multiscreen
