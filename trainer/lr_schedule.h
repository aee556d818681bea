// Learning-rate schedules (spec "Training recipe"): linear warmup, then
// constant (the paper's), cosine to a floor, or warmup-stable-decay (WSD).
#pragma once

#include <cstdint>

#include "configs/config.pb.h"

namespace multiscreen {

// The learning rate of optimizer step `step` (0-based) of `total_steps`. The trainer
// passes the number of updates applied so far, so steps skipped for fp16 overflow
// advance neither warmup nor decay.
// Warmup: peak·(step + 1)/warmup_steps for step < warmup_steps.
// After it: WARMUP_CONSTANT → peak; WARMUP_COSINE → floor + (peak − floor)·½(1 + cos(π·p)),
// p = (step − warmup)/(total − warmup); WARMUP_STABLE_DECAY → peak until the last
// decay_fraction of the steps, then linear to the floor. floor = min_lr_ratio·peak.
double LearningRate(const config::ScheduleConfig& schedule, double peak, int64_t step, int64_t total_steps);

}  // namespace multiscreen
