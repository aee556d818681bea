// Whether the current CUDA device can run this build's kernels: the checks every CUDA
// factory (cuda_kernel_table.h, cuda_transformer_kernels.h) makes before it creates
// anything, so that a missing driver or device is one line at start-up.
#pragma once

#include "absl/status/status.h"

namespace multiscreen::kernels::cuda {

// OK when a CUDA driver at least as new as this build's runtime is loaded and a device
// is current. Errors (FailedPrecondition, one line each): no driver; an unreadable
// runtime version; a driver older than the runtime (with cudaGetErrorString's text);
// no device visible; the current device unusable.
absl::Status CheckCudaDevice();

}  // namespace multiscreen::kernels::cuda
