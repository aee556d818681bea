// --device: where a command computes (train, forward, bench train). The GPU of a rank
// is chosen from its local rank; the device is checked once at start-up, so that a
// missing GPU or driver is one line before any work, never a failure mid-step.
#pragma once

#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "common/config.h"
#include "kernels/buffer.h"

ABSL_DECLARE_FLAG(std::string, device);
ABSL_DECLARE_FLAG(double, peak_tflops);

namespace multiscreen::cli {

// One GPU per local rank: device local_rank % count, so it works whether the launcher
// shows each process all of the node's GPUs or only its own. Returns "cuda:N (name)",
// or "cpu" when the build has no CUDA or no device is visible. Errors: cudaSetDevice's.
absl::StatusOr<std::string> BindDevice(int local_rank);

// The device --device names, for a command whose model computes in fp64 or not:
//   cpu;  cuda (errors: no CUDA in this build, no device visible, a driver older than
//   the runtime — with CUDA's message —, or fp64);  auto (the default): cuda where that
//   would succeed, else cpu. Any tp × pp × dp layout runs on either (the groups'
//   transport: parallel/comm_choice.h).
// Errors name the flag: "--device=cuda: ...".
absl::StatusOr<Device> ResolveDevice(bool fp64);

// --peak_tflops (train, bench train): MFU's denominator per process in TFLOP/s; 0 (the
// default) means measured at start. Error: a value outside [0.001, 1e6] other than 0,
// naming the flag.
absl::StatusOr<double> PeakTflops();

}  // namespace multiscreen::cli
