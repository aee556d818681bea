#include "kernels/cuda/tanh_norm.h"

#include "kernels/cuda/check.h"

namespace multiscreen::kernels::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;

// f(n) = tanh(n)/n and g(n) = f'(n)/n, with the CPU kernel's series below 0.1.
__device__ inline void Scale(float n, float* f, float* g) {
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

__device__ inline float WarpSum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__global__ void ForwardKernel(const float* h, float* u, int64_t rows, int64_t d) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const float* hr = h + row * d;
  float sq = 0.f;
  for (int64_t c = threadIdx.x; c < d; c += kWarp) sq += hr[c] * hr[c];
  sq = WarpSum(sq);
  float f, g;
  Scale(sqrtf(sq), &f, &g);
  for (int64_t c = threadIdx.x; c < d; c += kWarp) u[row * d + c] = hr[c] * f;
}

__global__ void BackwardKernel(const float* h, const float* du, float* dh, int64_t rows, int64_t d) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const float* hr = h + row * d;
  const float* dur = du + row * d;
  float sq = 0.f, dot = 0.f;
  for (int64_t c = threadIdx.x; c < d; c += kWarp) {
    sq += hr[c] * hr[c];
    dot += hr[c] * dur[c];
  }
  sq = WarpSum(sq);
  dot = WarpSum(dot);
  float f, g;
  Scale(sqrtf(sq), &f, &g);
  for (int64_t c = threadIdx.x; c < d; c += kWarp) dh[row * d + c] = f * dur[c] + g * dot * hr[c];
}

dim3 Grid(int64_t rows) { return dim3(static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock)); }

}  // namespace

absl::Status TanhNormForward(const float* h, float* u, int64_t rows, int64_t d, void* stream) {
  if (rows == 0) return absl::OkStatus();
  ForwardKernel<<<Grid(rows), dim3(kWarp, kRowsPerBlock), 0, static_cast<cudaStream_t>(stream)>>>(h, u, rows, d);
  MS_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status TanhNormBackward(const float* h, const float* du, float* dh, int64_t rows, int64_t d, void* stream) {
  if (rows == 0) return absl::OkStatus();
  BackwardKernel<<<Grid(rows), dim3(kWarp, kRowsPerBlock), 0, static_cast<cudaStream_t>(stream)>>>(h, du, dh, rows, d);
  MS_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace multiscreen::kernels::cuda
