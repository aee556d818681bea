// The CUDA kernel table: kernels::KernelTable<float> on the device current for the
// process (cudaGetDevice), every op enqueued on one stream the table owns. A thin
// class over the op families of kernels/cuda (elementwise, unit_rows, embedding,
// gemm, screening, cross_entropy, adamw), each the twin of its kernels/cpu file and
// tested against it (tests/cuda/kernel_table_cuda_test.cc). Only fp32: the GPU path
// computes in fp32 with 16-bit GEMM operands; there is no CUDA table for double.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel_table.h"

namespace multiscreen::kernels::cuda {

// A kernel table on the current CUDA device. Errors (one line each): no CUDA driver or
// no device visible; a driver older than this build's runtime (with the runtime's
// message); stream or cuBLAS(Lt) handle creation failure. options: the CPU's head
// blocking does not apply; the CUDA head picks its own (cross_entropy.h). The screening
// kernels are TiledScreening(options)'s; its error comes first.
absl::StatusOr<std::unique_ptr<KernelTable<float>>> MakeCudaKernelTable(const KernelOptions& options = {});

// Whether a table made with `options` runs the tiled screening kernels
// (screening_tiled.h: bf16 operands, fp32 accumulation; at widths other than d_K = 16,
// d_V = 64 they run the simple ones) rather than the simple fp32 kernels (screening.h):
// options.screening_kernel, where kAuto gives way to the environment variable
// MULTISCREEN_SCREENING_KERNEL=auto|simple|tiled (case-insensitive; unset or empty:
// auto), and auto means tiled exactly when options.precision is kBf16 (kFp16 keeps the
// simple kernels: the tiled ones' operands are bf16, not the fp16 GEMMs' contract).
// Error (one line): another value of the variable.
absl::StatusOr<bool> TiledScreening(const KernelOptions& options);

// Whether the CUDA Transformer kernels made with `options` run the tiled attention
// (attention_tiled.h: bf16 operands, fp32 accumulation; softmax at d_h = 64, the rest the
// simple kernels) rather than the simple fp32 kernels (attention.h): as TiledScreening,
// with options.attention_kernel and MULTISCREEN_ATTENTION_KERNEL=auto|simple|tiled.
absl::StatusOr<bool> TiledAttention(const KernelOptions& options);

}  // namespace multiscreen::kernels::cuda
