// SwiGLU on a CUDA device (swiglu.h): grid-stride loops over the rows·f hidden units,
// σ with expf (the CPU's std::exp on float).
#include "kernels/cuda/swiglu.h"

#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"

namespace multiscreen::kernels::cuda {
namespace {

__global__ void ForwardKernel(const float* gu, float* h, int64_t f, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / f, c = i % f;
    const float a = gu[r * 2 * f + c], u = gu[r * 2 * f + f + c];
    const float sig = 1.f / (1.f + expf(-a));
    h[i] = a * sig * u;
  }
}

__global__ void BackwardKernel(const float* gu, const float* dh, float* dgu, int64_t f, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / f, c = i % f;
    const float a = gu[r * 2 * f + c], u = gu[r * 2 * f + f + c];
    const float sig = 1.f / (1.f + expf(-a));
    const float g = dh[i];
    dgu[r * 2 * f + f + c] = g * a * sig;
    dgu[r * 2 * f + c] = g * u * sig * (1.f + a * (1.f - sig));
  }
}

}  // namespace

void SwiGluForward(const float* gu, float* h, int64_t rows, int64_t f, cudaStream_t stream) {
  const int64_t n = rows * f;
  if (n <= 0) return;
  Launch<ForwardKernel>(BlocksFor(n), kThreads, 0, stream, gu, h, f, n);
  MS_CUDA_CHECK_LAUNCH("SwiGluForward");
}

void SwiGluBackward(const float* gu, const float* dh, float* dgu, int64_t rows, int64_t f, cudaStream_t stream) {
  const int64_t n = rows * f;
  if (n <= 0) return;
  Launch<BackwardKernel>(BlocksFor(n), kThreads, 0, stream, gu, dh, dgu, f, n);
  MS_CUDA_CHECK_LAUNCH("SwiGluBackward");
}

}  // namespace multiscreen::kernels::cuda
