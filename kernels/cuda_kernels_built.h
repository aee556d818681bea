// Whether this build has CUDA kernels for a Real type: the check the device factories
// (MakeKernelTable in kernel_table.h, MakeTransformerKernels in transformer_kernels.h)
// share before they look for a device. Defined in kernel_table.cc.
#pragma once

#include "absl/status/status.h"

namespace multiscreen {

// OK for float in a build with CUDA; else the one-line reason --device=cuda is refused:
// fp64 (InvalidArgument: the GPU path computes in fp32), or no CUDA in this build
// (FailedPrecondition). Says nothing of the device itself.
template <typename Real>
absl::Status CudaKernelsBuilt();

}  // namespace multiscreen
