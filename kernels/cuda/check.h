// Return-code checks for the CUDA runtime and cuBLAS(Lt), one macro per library and
// use: MS_CUDA_RETURN_IF_ERROR turns a failure into an absl::Status (setup code that
// can report); MS_CUDA_CHECK and MS_CUBLAS_CHECK are fatal (the kernel table's ops,
// kernels/kernel_table.h: a failing device call mid-step prints one line and exits).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cublas_library.h"

#define MS_CUDA_RETURN_IF_ERROR(call)                                                                  \
  do {                                                                                                 \
    const cudaError_t ms_cuda_err_ = (call);                                                           \
    if (ms_cuda_err_ != cudaSuccess) {                                                                 \
      return ::absl::InternalError(::absl::StrCat(#call, ": ", cudaGetErrorString(ms_cuda_err_)));     \
    }                                                                                                  \
  } while (0)

namespace multiscreen::kernels::cuda {

// Prints `multiscreen: fatal: CUDA error in <op>: <message>` on one line and exits(1).
[[noreturn]] inline void FatalCudaError(const char* op, const char* message) {
  std::fprintf(stderr, "multiscreen: fatal: CUDA error in %s: %s\n", op, message);
  std::fflush(stderr);
  std::exit(1);
}

}  // namespace multiscreen::kernels::cuda

// Fatal unless `call` returns cudaSuccess; `op` names the kernel-table op (a C string).
#define MS_CUDA_CHECK(op, call)                                                                        \
  do {                                                                                                 \
    const cudaError_t ms_cuda_err_ = (call);                                                           \
    if (ms_cuda_err_ != cudaSuccess) {                                                                 \
      ::multiscreen::kernels::cuda::FatalCudaError((op), cudaGetErrorString(ms_cuda_err_));            \
    }                                                                                                  \
  } while (0)

// Fatal unless the last kernel launch succeeded (a bad configuration or an earlier
// asynchronous fault shows here).
#define MS_CUDA_CHECK_LAUNCH(op) MS_CUDA_CHECK((op), cudaGetLastError())

// Fatal unless a cuBLAS or cuBLASLt call returns CUBLAS_STATUS_SUCCESS.
#define MS_CUBLAS_CHECK(op, call)                                                                      \
  do {                                                                                                 \
    const cublasStatus_t ms_cublas_status_ = (call);                                                   \
    if (ms_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                                  \
      ::multiscreen::kernels::cuda::FatalCudaError(                                                    \
          (op), ::multiscreen::kernels::cuda::Cublas().cublasGetStatusString(ms_cublas_status_));      \
    }                                                                                                  \
  } while (0)
