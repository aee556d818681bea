// Dynamic loss scaling for fp16 (DESIGN "Precision"): the loss gradient is
// multiplied by `scale`; a step whose gradients overflow (inf/NaN) is skipped
// and the scale backs off; after `growth_interval` good steps in a row it grows.
#pragma once

#include <cstdint>

namespace multiscreen {

struct LossScalerState {
  double scale = 65536.0;
  int64_t good_steps = 0;   // finite steps since the last change
  int64_t skipped = 0;      // overflowed steps so far
};

class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(bool enabled, double initial_scale = 65536.0, int64_t growth_interval = 2000,
                             double growth_factor = 2.0, double backoff_factor = 0.5);
  // The factor the loss gradient is multiplied by (1 when disabled).
  double scale() const { return enabled_ ? state_.scale : 1.0; }
  // Records a step's outcome; returns true when the step's update should apply.
  bool Update(bool gradients_finite);
  const LossScalerState& state() const { return state_; }
  void set_state(const LossScalerState& s) { state_ = s; }
  bool enabled() const { return enabled_; }

 private:
  bool enabled_;
  LossScalerState state_;
  int64_t growth_interval_;
  double growth_factor_, backoff_factor_;
};

}  // namespace multiscreen
