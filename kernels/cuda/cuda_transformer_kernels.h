// The Transformer baseline's kernels on a CUDA device: kernels::TransformerKernels<float>
// (kernels/transformer_kernels.h) over the op families rms_norm, rope, attention and
// swiglu of kernels/cuda, each the twin of its kernels/cpu file and tested against it
// (tests/cuda/transformer_kernels_cuda_test.cc). fp32 only, as the CUDA kernel table;
// every op on the table stream (table_stream.h), so it is ordered with the table's ops.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel_table.h"
#include "kernels/transformer_kernels.h"

namespace multiscreen::kernels::cuda {

// The Transformer kernels on the current CUDA device; the attention is the tiled kernel
// (attention_tiled.h) or the simple one (attention.h) by TiledAttention(options)
// (kernels/cuda/cuda_kernel_table.h: options.precision, attention_kernel and
// MULTISCREEN_ATTENTION_KERNEL); the rest of options does not apply. Errors (one line
// each): TiledAttention's first, then those of CheckCudaDevice (kernels/cuda/device_check.h).
absl::StatusOr<std::unique_ptr<TransformerKernels<float>>> MakeCudaTransformerKernels(
    const KernelOptions& options = {});

}  // namespace multiscreen::kernels::cuda
