// Row-wise unit normalization on a CUDA device, the twin of kernels/cpu/unit_rows.h
// (spec steps 1, 5 and 14: Ē, q̄/k̄/v̄, PLNorm): y = x / max(‖x‖, 1e-12) per row, and
// its backward. fp32, one warp per row (the sums in fp32, as the CPU's). Pointers
// are device pointers; launches on `stream`; a failing launch is fatal.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace multiscreen::kernels::cuda {

// y[r, :] = x[r, :] / max(‖x[r, :]‖, kUnitNormFloor); norm[r] = ‖x[r, :]‖.
//   x: rows of d values, row stride ldx; y: row stride ldy (may alias x);
//   norm: [rows] written (may be null).
void UnitRowsForward(const float* x, int64_t ldx, float* y, int64_t ldy, float* norm, int64_t rows, int64_t d,
                     cudaStream_t stream);

// dx = (dy − y (y·dy)) / ‖x‖, or dy / floor where ‖x‖ ≤ floor (norm not > floor).
//   y [rows, d] (ldy) the forward output; norm [rows]; dy (lddy); dx (lddx) written,
//   or added to when accumulate. dx may alias dy.
void UnitRowsBackward(const float* y, int64_t ldy, const float* norm, const float* dy, int64_t lddy, float* dx,
                      int64_t lddx, int64_t rows, int64_t d, bool accumulate, cudaStream_t stream);

}  // namespace multiscreen::kernels::cuda
