// RMSNorm (spec "Transformer baseline") on a CUDA device, the twin of
// kernels/cpu/rms_norm.h: y = g ⊙ x/√(mean x² + ε) per row, and its backward. fp32
// values, fp64 sums as the CPU's; one warp per row. The gain's gradient sums over rows
// in a fixed order (per-chunk partial sums, then the chunks in order): deterministic,
// no atomics. Pointers are device pointers; launches on `stream`; failures are fatal.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/device_array.h"

namespace multiscreen::kernels::cuda {

// The backward's device scratch for the gain's partial sums, grown and kept.
struct RmsNormScratch {
  DeviceArray<double> partial{Device::kCuda};  // [row chunks, d]
};

// x: [rows, d];  gain: [d] or null (no gain);  y: [rows, d] written (may alias x);
// rstd: [rows] written, 1/√(mean(x²) + cpu::kRmsNormEps).
void RmsNormForward(const float* x, const float* gain, float* y, float* rstd, int64_t rows, int64_t d,
                    cudaStream_t stream);

// With x̂ = x·rstd and ĝ = dy ⊙ g: dx = rstd · (ĝ − x̂ · mean(ĝ ⊙ x̂)) written
// (accumulate false) or added (true); dgain[c] += Σ_r dy[r, c] · x̂[r, c] when gain and
// dgain are non-null. dx must not alias x or dy.
void RmsNormBackward(const float* x, const float* gain, const float* rstd, const float* dy, float* dx, float* dgain,
                     int64_t rows, int64_t d, bool accumulate, RmsNormScratch* scratch, cudaStream_t stream);

}  // namespace multiscreen::kernels::cuda
