// One macro for CUDA runtime return codes: returns an absl::Status naming the
// call and CUDA's message.
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#define MS_CUDA_RETURN_IF_ERROR(call)                                                                  \
  do {                                                                                                 \
    const cudaError_t ms_cuda_err_ = (call);                                                           \
    if (ms_cuda_err_ != cudaSuccess) {                                                                 \
      return ::absl::InternalError(::absl::StrCat(#call, ": ", cudaGetErrorString(ms_cuda_err_)));     \
    }                                                                                                  \
  } while (0)
