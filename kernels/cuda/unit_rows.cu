// Unit rows on a CUDA device (unit_rows.h): one warp per row, kRowsPerBlock rows per block.
#include "kernels/cuda/unit_rows.h"

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_math.cuh"

namespace multiscreen::kernels::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;
constexpr float kFloor = 1e-12f;  // cpu::kUnitNormFloor (that header is not included: OpenMP pragmas)

__global__ void ForwardKernel(const float* x, int64_t ldx, float* y, int64_t ldy, float* norm, int64_t rows,
                              int64_t d) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const float* xr = x + row * ldx;
  float sq = 0.f;
  for (int64_t c = threadIdx.x; c < d; c += kWarp) sq += xr[c] * xr[c];
  const float n = sqrtf(WarpSum(sq));
  const float inv = 1.f / (n < kFloor ? kFloor : n);  // std::max(n, floor): NaN stays NaN
  float* yr = y + row * ldy;
  for (int64_t c = threadIdx.x; c < d; c += kWarp) yr[c] = xr[c] * inv;
  if (norm != nullptr && threadIdx.x == 0) norm[row] = n;
}

__global__ void BackwardKernel(const float* y, int64_t ldy, const float* norm, const float* dy, int64_t lddy,
                               float* dx, int64_t lddx, int64_t rows, int64_t d, bool accumulate) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const float* yr = y + row * ldy;
  const float* dyr = dy + row * lddy;
  float* dxr = dx + row * lddx;
  const bool clamped = !(norm[row] > kFloor);
  const float inv = 1.f / (clamped ? kFloor : norm[row]);
  float dot = 0.f;
  if (!clamped) {
    for (int64_t c = threadIdx.x; c < d; c += kWarp) dot += yr[c] * dyr[c];
    dot = WarpSum(dot);
  }
  for (int64_t c = threadIdx.x; c < d; c += kWarp) {
    const float g = (dyr[c] - yr[c] * dot) * inv;
    dxr[c] = accumulate ? dxr[c] + g : g;
  }
}

dim3 Grid(int64_t rows) { return dim3(static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock)); }

}  // namespace

void UnitRowsForward(const float* x, int64_t ldx, float* y, int64_t ldy, float* norm, int64_t rows, int64_t d,
                     cudaStream_t stream) {
  if (rows <= 0) return;
  Launch<ForwardKernel>(Grid(rows), dim3(kWarp, kRowsPerBlock), 0, stream, x, ldx, y, ldy, norm, rows, d);
  MS_CUDA_CHECK_LAUNCH("UnitRowsForward");
}

void UnitRowsBackward(const float* y, int64_t ldy, const float* norm, const float* dy, int64_t lddy, float* dx,
                      int64_t lddx, int64_t rows, int64_t d, bool accumulate, cudaStream_t stream) {
  if (rows <= 0) return;
  Launch<BackwardKernel>(Grid(rows), dim3(kWarp, kRowsPerBlock), 0, stream, y, ldy, norm, dy, lddy, dx, lddx, rows, d,
                         accumulate);
  MS_CUDA_CHECK_LAUNCH("UnitRowsBackward");
}

}  // namespace multiscreen::kernels::cuda
