// TanhNorm kernels on a CUDA device (tanh_norm.h): one warp per row, the scale from device_math.cuh.
#include "kernels/cuda/tanh_norm.h"

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_math.cuh"

namespace multiscreen::kernels::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;

__global__ void ForwardKernel(const float* h, float* u, int64_t rows, int64_t d) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const float* hr = h + row * d;
  float sq = 0.f;
  for (int64_t c = threadIdx.x; c < d; c += kWarp) sq += hr[c] * hr[c];
  sq = WarpSum(sq);
  float f, g;
  TanhNormScale(sqrtf(sq), &f, &g);
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
  TanhNormScale(sqrtf(sq), &f, &g);
  for (int64_t c = threadIdx.x; c < d; c += kWarp) dh[row * d + c] = f * dur[c] + g * dot * hr[c];
}

dim3 Grid(int64_t rows) { return dim3(static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock)); }

}  // namespace

absl::Status TanhNormForward(const float* h, float* u, int64_t rows, int64_t d, void* stream) {
  if (rows == 0) return absl::OkStatus();
  Launch<ForwardKernel>(Grid(rows), dim3(kWarp, kRowsPerBlock), 0, static_cast<cudaStream_t>(stream), h, u, rows, d);
  MS_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status TanhNormBackward(const float* h, const float* du, float* dh, int64_t rows, int64_t d, void* stream) {
  if (rows == 0) return absl::OkStatus();
  Launch<BackwardKernel>(Grid(rows), dim3(kWarp, kRowsPerBlock), 0, static_cast<cudaStream_t>(stream), h, du, dh, rows,
                         d);
  MS_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace multiscreen::kernels::cuda
