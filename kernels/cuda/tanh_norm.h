// TanhNorm (spec step 11) on a CUDA device, the twin of kernels/cpu/tanh_norm.h:
// u = h · tanh(‖h‖)/‖h‖ row-wise, fp32, one warp per row, the same series below
// ‖h‖ = 0.1. Pointers are device pointers; launches on `stream` (0: default).
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace multiscreen::kernels::cuda {

//   h: [rows, d] read;  u: [rows, d] written.
absl::Status TanhNormForward(const float* h, float* u, int64_t rows, int64_t d, void* stream = nullptr);

// dh = f(n) du + h (h·du) f'(n)/n.   h, du: [rows, d] read;  dh: [rows, d] written.
absl::Status TanhNormBackward(const float* h, const float* du, float* dh, int64_t rows, int64_t d,
                              void* stream = nullptr);

}  // namespace multiscreen::kernels::cuda
