// The Transformer baseline's kernels on a CUDA device: kernels::TransformerKernels<float>
// (kernels/transformer_kernels.h) over the op families rms_norm, rope, attention and
// swiglu of kernels/cuda, each the twin of its kernels/cpu file and tested against it
// (tests/cuda/transformer_kernels_cuda_test.cc). fp32 only, as the CUDA kernel table;
// every op on the legacy default stream, so it is ordered with the table's ops.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/transformer_kernels.h"

namespace multiscreen::kernels::cuda {

// The Transformer kernels on the current CUDA device. Errors (one line each): those of
// CheckCudaDevice (kernels/cuda/device_check.h).
absl::StatusOr<std::unique_ptr<TransformerKernels<float>>> MakeCudaTransformerKernels();

}  // namespace multiscreen::kernels::cuda
