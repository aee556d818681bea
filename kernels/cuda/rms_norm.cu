// RMSNorm on a CUDA device (rms_norm.h): one warp per row for y, rstd and dx; the
// gain's gradient in two fixed passes (a partial sum per chunk of rows and column,
// then each column's partials in chunk order).
#include "kernels/cuda/rms_norm.h"

#include <algorithm>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.h"

namespace multiscreen::kernels::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;
constexpr int64_t kChunkRows = 64;  // rows per partial sum of the gain's gradient (at least)
constexpr double kEps = 1e-6;       // cpu::kRmsNormEps (that header's .cc has OpenMP pragmas; the value is the same)

__global__ void ForwardKernel(const float* x, const float* gain, float* y, float* rstd, int64_t rows, int64_t d) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const float* xr = x + row * d;
  double sq = 0;
  for (int64_t c = threadIdx.x; c < d; c += kWarp) sq += double(xr[c]) * double(xr[c]);
  const float s = static_cast<float>(1.0 / sqrt(WarpSumDouble(sq) / double(d) + kEps));
  float* yr = y + row * d;
  for (int64_t c = threadIdx.x; c < d; c += kWarp) yr[c] = gain != nullptr ? xr[c] * s * gain[c] : xr[c] * s;
  if (threadIdx.x == 0) rstd[row] = s;
}

__global__ void BackwardKernel(const float* x, const float* gain, const float* rstd, const float* dy, float* dx,
                               int64_t rows, int64_t d, bool accumulate) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const float* xr = x + row * d;
  const float* dyr = dy + row * d;
  float* dxr = dx + row * d;
  const float s = rstd[row];
  double dot = 0;  // Σ_c ĝ_c x̂_c
  for (int64_t c = threadIdx.x; c < d; c += kWarp) {
    dot += double(dyr[c] * (gain != nullptr ? gain[c] : 1.f)) * double(xr[c] * s);
  }
  const float mean = static_cast<float>(WarpSumDouble(dot) / double(d));
  for (int64_t c = threadIdx.x; c < d; c += kWarp) {
    const float g = dyr[c] * (gain != nullptr ? gain[c] : 1.f);
    const float v = s * (g - xr[c] * s * mean);
    dxr[c] = accumulate ? dxr[c] + v : v;
  }
}

// partial[chunk, c] = Σ_{r in chunk} dy[r, c] · (x[r, c] · rstd[r]), rows in order.
// Grid (column blocks, chunks); one thread per column.
__global__ void GainPartialKernel(const float* x, const float* rstd, const float* dy, double* partial, int64_t rows,
                                  int64_t d, int64_t chunk_rows) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= d) return;
  const int64_t r0 = int64_t(blockIdx.y) * chunk_rows, r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
  double acc = 0;
  for (int64_t r = r0; r < r1; ++r) acc += double(dy[r * d + c]) * double(x[r * d + c] * rstd[r]);
  partial[int64_t(blockIdx.y) * d + c] = acc;
}

// dgain[c] += Σ_chunk partial[chunk, c], chunks in order.
__global__ void GainSumKernel(const double* partial, int64_t chunks, int64_t d, float* dgain) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= d) return;
  double acc = 0;
  for (int64_t k = 0; k < chunks; ++k) acc += partial[k * d + c];
  dgain[c] += static_cast<float>(acc);
}

dim3 RowGrid(int64_t rows) { return dim3(static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock)); }

}  // namespace

void RmsNormForward(const float* x, const float* gain, float* y, float* rstd, int64_t rows, int64_t d,
                    cudaStream_t stream) {
  if (rows <= 0) return;
  Launch<ForwardKernel>(RowGrid(rows), dim3(kWarp, kRowsPerBlock), 0, stream, x, gain, y, rstd, rows, d);
  MS_CUDA_CHECK_LAUNCH("RmsNormForward");
}

void RmsNormBackward(const float* x, const float* gain, const float* rstd, const float* dy, float* dx, float* dgain,
                     int64_t rows, int64_t d, bool accumulate, RmsNormScratch* scratch, cudaStream_t stream) {
  if (rows <= 0) return;
  Launch<BackwardKernel>(RowGrid(rows), dim3(kWarp, kRowsPerBlock), 0, stream, x, gain, rstd, dy, dx, rows, d,
                         accumulate);
  MS_CUDA_CHECK_LAUNCH("RmsNormBackward");
  if (gain == nullptr || dgain == nullptr || d <= 0) return;
  // Chunks of kChunkRows rows, longer where rows would need more than 65535 (the grid's y limit).
  const int64_t chunk_rows = std::max<int64_t>(kChunkRows, (rows + 65534) / 65535);
  const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  scratch->partial.Resize(chunks * d);
  const unsigned column_blocks = static_cast<unsigned>((d + kThreads - 1) / kThreads);
  Launch<GainPartialKernel>(dim3(column_blocks, static_cast<unsigned>(chunks)), kThreads, 0, stream, x, rstd, dy,
                            scratch->partial.data(), rows, d, chunk_rows);
  MS_CUDA_CHECK_LAUNCH("RmsNormBackward");
  Launch<GainSumKernel>(column_blocks, kThreads, 0, stream, scratch->partial.data(), chunks, d, dgain);
  MS_CUDA_CHECK_LAUNCH("RmsNormBackward");
}

}  // namespace multiscreen::kernels::cuda
