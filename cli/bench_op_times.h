// `bench train --op_times`: the device time of each kernel and cuBLAS(Lt) product of one
// training step, by the name the emulated device's tally uses (kernels/cuda/kernel_times.h),
// so that tools/perf_model.py --measured puts each op's measured time beside its modelled
// one (issue 42 part 4). Needs a build with CUDA (a GPU, or the emulated device, where the
// times are the emulator's and mean nothing about a GPU).
#pragma once

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace multiscreen::cli {

// True in a build with kernels/cuda (nvcc or emulated).
bool CanTimeDeviceOps();

// Starts recording every launch's and product's device time.
void BeginOpTimes();

// Stops and returns {"unit": "ms", "ops": [{"name", "kind" (kernel | library), "calls",
// "ms"}, ...] by name, "total_ms"}. Errors: a CUDA event's (named).
absl::StatusOr<nlohmann::json> EndOpTimes();

// Prints EndOpTimes' result as a text table, the slowest first.
void PrintOpTimes(const nlohmann::json& times);

}  // namespace multiscreen::cli
