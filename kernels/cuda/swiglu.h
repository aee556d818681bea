// SwiGLU (spec "Transformer baseline") on a CUDA device, the twin of
// kernels/cpu/swiglu.h: h = SiLU(a) ⊙ u with SiLU(a) = a·σ(a), fp32, elementwise.
// Pointers are device pointers; launches on `stream`; failures are fatal.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace multiscreen::kernels::cuda {

// gu: [rows, 2f], row r = [a_r | u_r];  h: [rows, f] written.
void SwiGluForward(const float* gu, float* h, int64_t rows, int64_t f, cudaStream_t stream);

// dgu = [da | du] [rows, 2f] written from dh [rows, f]:
//   du = dh · SiLU(a),  da = dh · u · σ(a)(1 + a(1 − σ(a))).
void SwiGluBackward(const float* gu, const float* dh, float* dgu, int64_t rows, int64_t f, cudaStream_t stream);

}  // namespace multiscreen::kernels::cuda
