// Device functions shared by the CUDA kernels: the TanhNorm scale (spec step 11, the
// twin of cpu::TanhNormScale with its series below ‖h‖ = 0.1), the output gate (spec
// step 12, the twin of kernels/cpu/gate.h with the library's expf/tanhf), warp sums
// in fp32 and fp64, a block sum in fp64, and the 16-bit GEMM operands' rounding.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/launch.h"

namespace multiscreen::kernels::cuda {

// x rounded to nearest even into the 16-bit format of *dst: how every 16-bit GEMM
// operand is made (gemm.h's packing, the head's gradient rows).
__device__ inline void StoreHalf(float x, __nv_bfloat16* dst) { *dst = __float2bfloat16_rn(x); }
__device__ inline void StoreHalf(float x, __half* dst) { *dst = __float2half_rn(x); }

// f(n) = tanh(n)/n and g(n) = f'(n)/n, with the CPU kernel's series below 0.1.
__device__ inline void TanhNormScale(float n, float* f, float* g) {
  if (n < 0.1f) {
    const float n2 = n * n;
    *f = 1.f + n2 * (-1.f / 3 + n2 * (2.f / 15 + n2 * (-17.f / 315 + n2 * (62.f / 2835))));
    *g = -2.f / 3 + n2 * (8.f / 15 + n2 * (-102.f / 315 + n2 * (496.f / 2835)));
    return;
  }
  const float t = tanhf(n);
  *f = t / n;
  *g = (n * (1.f - t * t) - t) / (n * n * n);
}

// ĝ = tanh(SiLU(g)) and dĝ/dg = (1 − ĝ²) · σ(g) · (1 + g (1 − σ(g))).
__device__ inline void GateForwardAndDerivative(float g, float* gate, float* derivative) {
  const float sig = 1.f / (1.f + expf(-g));
  const float t = tanhf(g * sig);
  *gate = t;
  *derivative = (1.f - t * t) * sig * (1.f + g * (1.f - sig));
}

// Sum of v over the 32 lanes of a full warp (every lane gets it).
__device__ inline float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum of v over the 32 lanes of a full warp in fp64 (every lane gets it), by a fixed
// butterfly: the same order on every run.
__device__ inline double WarpSumDouble(double v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum of v over a block of kThreads threads, by a fixed tree (the same order on every
// run); every thread gets it. Every thread of the block must call it.
__device__ inline double BlockSum(double v) {
  __shared__ double shared[kThreads];
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  const double result = shared[0];
  __syncthreads();  // the buffer may be reused by the next call
  return result;
}

}  // namespace multiscreen::kernels::cuda
