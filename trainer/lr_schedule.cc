#include "trainer/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace multiscreen {

double LearningRate(const config::ScheduleConfig& s, double peak, int64_t step, int64_t total_steps) {
  const int64_t warmup = s.warmup_steps();
  if (step < warmup) return peak * double(step + 1) / double(warmup);
  const double floor = s.min_lr_ratio() * peak;
  switch (s.kind()) {
    case config::ScheduleConfig::WARMUP_COSINE: {
      const double span = std::max<int64_t>(1, total_steps - warmup);
      const double p = std::min(1.0, double(step - warmup) / span);
      return floor + (peak - floor) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
    }
    case config::ScheduleConfig::WARMUP_STABLE_DECAY: {
      const int64_t decay_steps = static_cast<int64_t>(std::llround(s.decay_fraction() * double(total_steps)));
      const int64_t decay_start = total_steps - decay_steps;
      if (step < decay_start || decay_steps <= 0) return peak;
      const double p = std::min(1.0, double(step - decay_start + 1) / double(decay_steps));
      return peak + (floor - peak) * p;
    }
    default:
      return peak;
  }
}

}  // namespace multiscreen
