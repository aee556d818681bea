// Softmax cross-entropy kernels and the fused head on a CUDA device (cross_entropy.h).
#include "kernels/cuda/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.h"

namespace multiscreen::kernels::cuda {
namespace {

// max of a row's values (NaNs skipped: x > mx is false for them), over the block.
__device__ float BlockMax(float v) {
  __shared__ float shared[kThreads];
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half && shared[threadIdx.x + half] > shared[threadIdx.x]) {
      shared[threadIdx.x] = shared[threadIdx.x + half];
    }
    __syncthreads();
  }
  const float result = shared[0];
  __syncthreads();  // the buffer may be reused by the next call
  return result;
}


__device__ float RowMax(const float* z, int64_t V) {
  float mx = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += kThreads) mx = z[v] > mx ? z[v] : mx;
  return BlockMax(mx);
}

__device__ double RowSumExp(const float* z, int64_t V, float mx) {
  double sum = 0;
  for (int64_t v = threadIdx.x; v < V; v += kThreads) sum += static_cast<double>(expf(z[v] - mx));
  return BlockSum(sum);
}

// Block r: row_max[r], row_sum[r].
__global__ void StatsKernel(const float* z, int64_t ld, int64_t V, double* row_max, double* row_sum) {
  const float* zr = z + int64_t(blockIdx.x) * ld;
  const float mx = RowMax(zr, V);
  const double sum = RowSumExp(zr, V, mx);
  if (threadIdx.x == 0) {
    row_max[blockIdx.x] = mx;
    row_sum[blockIdx.x] = sum;
  }
}

__global__ void TargetKernel(const float* z, int64_t ld, int64_t rows, const int64_t* target, double* out) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < rows) out[r] = target[r] >= 0 ? static_cast<double>(z[r * ld + target[r]]) : 0.0;
}

// Row blockIdx.y, columns strided: z ← exp(z − lse)·coef − [v == target]·coef.
__global__ void GradKernel(float* z, int64_t ld, int64_t V, const double* lse, const int64_t* target, float coef) {
  const int64_t r = blockIdx.y;
  float* zr = z + r * ld;
  const float l = static_cast<float>(lse[r]);
  for (int64_t v = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; v < V; v += int64_t(gridDim.x) * blockDim.x) {
    float g = expf(zr[v] - l) * coef;
    if (v == target[r]) g -= coef;
    zr[v] = g;
  }
}

// The head's row pass, block r of a chunk: the shift m (fixed, or the row max), the
// target logit (read before anything is written), lse = m + log Σ exp(z − m), and with
// grad z ← c · (exp(z − m)/Σ − [v == target]), or where z16 is given that gradient
// rounded into z16 instead (row stride V; z then unchanged): as the 16-bit products read it.
template <typename Half>
__global__ void HeadRowKernel(float* z, int64_t V, double shift, const int64_t* target, float c, bool grad,
                              double* lse, double* target_logit, Half* z16) {
  float* zr = z + int64_t(blockIdx.x) * V;
  const int64_t t = target[blockIdx.x];
  const float m = isnan(shift) ? RowMax(zr, V) : static_cast<float>(shift);
  const double tl = t >= 0 ? static_cast<double>(zr[t]) : 0.0;
  const double sum = RowSumExp(zr, V, m);  // ends with a block barrier: every read of zr[t] is done
  if (threadIdx.x == 0) {
    lse[blockIdx.x] = static_cast<double>(m) + log(sum);
    target_logit[blockIdx.x] = tl;
  }
  if (!grad) return;
  const float inv = static_cast<float>(1.0 / sum);
  Half* z16r = z16 != nullptr ? z16 + int64_t(blockIdx.x) * V : nullptr;
  for (int64_t v = threadIdx.x; v < V; v += kThreads) {
    const float p = expf(zr[v] - m) * inv;
    const float g = c * (v == t ? p - 1.f : p);
    if (z16r != nullptr) {
      StoreHalf(g, z16r + v);  // the products read these alone
    } else {
      zr[v] = g;
    }
  }
}

// One thread: the rows' HeadMeanLoss (kernels/kernel_table.h) in its order and rounding,
// added to *sum (zeroed by the take: +0 + loss is loss bit for bit, as a mean of
// lse − target logit summed from +0 is never −0).
__global__ void MeanLossKernel(const double* lse, const double* target_logit, int64_t rows, double* sum) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double loss = 0;
  for (int64_t r = 0; r < rows; ++r) loss += lse[r] - target_logit[r];
  loss /= double(rows);
  *sum += loss;
}

// HeadRowKernel over a chunk of nr rows; z16 (16-bit gradient rows) null or in `precision`.
void HeadRows(Precision precision, unsigned nr, float* z, int64_t V, double shift, const int64_t* target, float c,
              bool grad, double* lse, double* target_logit, uint16_t* z16, cudaStream_t stream) {
  if (precision == Precision::kFp16) {
    Launch<HeadRowKernel<__half>>(nr, kThreads, 0, stream, z, V, shift, target, c, grad, lse, target_logit,
                                  reinterpret_cast<__half*>(z16));
  } else {
    Launch<HeadRowKernel<__nv_bfloat16>>(nr, kThreads, 0, stream, z, V, shift, target, c, grad, lse, target_logit,
                                         reinterpret_cast<__nv_bfloat16*>(z16));
  }
  MS_CUDA_CHECK_LAUNCH("HeadLoss");
}

// Host [rows] targets on the device through pinned staging (no copy if the same as the last).
const int64_t* UploadTargets(const char* op, const int64_t* target, int64_t rows, CrossEntropyScratch* scratch,
                             PinnedStaging* staging, cudaStream_t stream) {
  return scratch->target.Upload(op, target, rows, staging, stream);
}

// Copies [rows] device doubles to the host and waits.
void DownloadDoubles(const char* op, const double* src, int64_t rows, double* host, cudaStream_t stream) {
  MS_CUDA_CHECK(op, cudaMemcpyAsync(host, src, rows * sizeof(double), cudaMemcpyDeviceToHost, stream));
  MS_CUDA_CHECK(op, cudaStreamSynchronize(stream));
}

// C = alpha · op(A) · op(B) + beta · C on the caller's fp32 operands (Run) or on packed
// 16-bit ones (RunPacked), in `precision`.
void Product(GemmRunner* gemm, Precision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
             float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm->Run(precision, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void Product(GemmRunner* gemm, Precision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
             float alpha, const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c,
             int64_t ldc) {
  gemm->RunPacked(precision, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// HeadLoss over the operands as the products read them: T = float (kFp32: y, Ē as
// given; the row pass leaves each gradient row in its logits row, so with a backward the
// logits are computed into the group's rows of dz) or uint16_t (packed y and Ē; the row
// pass computes the logits in `logits` [chunk, V] and rounds the gradient into dz).
// dz: the ∂Z group [group, V], null without a backward; group a multiple of chunk (or rows).
template <typename T>
void HeadGroups(const HeadLossArgs<float>& args, const T* y, const T* e_bar, T* dz, float* logits,
                const int64_t* target_dev, int64_t chunk, int64_t group, GemmRunner* gemm,
                CrossEntropyScratch* scratch, cudaStream_t stream) {
  const int64_t rows = args.rows, V = args.vocab, d_e = args.d_e;
  const bool grad = dz != nullptr;
  for (int64_t g0 = 0; g0 < rows; g0 += group) {
    const int64_t ng = std::min(group, rows - g0);
    for (int64_t r0 = g0; r0 < g0 + ng; r0 += chunk) {
      const int64_t nr = std::min(chunk, g0 + ng - r0);
      T* dz_rows = grad ? dz + (r0 - g0) * V : nullptr;  // this chunk's rows of the group
      float* z = logits;
      uint16_t* g16 = nullptr;
      if constexpr (std::is_same_v<T, float>) {
        if (grad) z = dz_rows;
      } else {
        g16 = dz_rows;
      }
      Product(gemm, args.precision, false, true, nr, V, d_e, args.scale, y + r0 * d_e, d_e, e_bar, d_e, 0.f, z, V);
      HeadRows(args.precision, static_cast<unsigned>(nr), z, V, args.shift, target_dev + r0, args.coef * args.scale,
               grad, scratch->first.data() + r0, scratch->second.data() + r0, g16, stream);
    }
    if (grad) {  // the group's products: Ē and d_e_bar each read (and d_e_bar written) once
      Product(gemm, args.precision, false, false, ng, d_e, V, 1.f, dz, V, e_bar, d_e, 0.f, args.dy + g0 * d_e, d_e);
      Product(gemm, args.precision, true, false, V, d_e, ng, 1.f, dz, V, y + g0 * d_e, d_e, 1.f, args.d_e_bar, d_e);
    }
  }
}

}  // namespace

void SoftmaxStats(const float* z, int64_t ld, int64_t rows, int64_t V, double* row_max, double* row_sum,
                  CrossEntropyScratch* scratch, cudaStream_t stream) {
  if (rows <= 0) return;
  const char* op = "SoftmaxStats";
  scratch->first.Resize(rows);
  scratch->second.Resize(rows);
  Launch<StatsKernel>(static_cast<unsigned>(rows), kThreads, 0, stream, z, ld, V,
                      scratch->first.data(), scratch->second.data());
  MS_CUDA_CHECK_LAUNCH(op);
  MS_CUDA_CHECK(op, cudaMemcpyAsync(row_max, scratch->first.data(), rows * sizeof(double), cudaMemcpyDeviceToHost,
                                    stream));
  DownloadDoubles(op, scratch->second.data(), rows, row_sum, stream);
}

void TargetLogits(const float* z, int64_t ld, int64_t rows, const int64_t* target, double* out,
                  CrossEntropyScratch* scratch, PinnedStaging* staging, cudaStream_t stream) {
  if (rows <= 0) return;
  const char* op = "TargetLogits";
  const int64_t* target_dev = UploadTargets(op, target, rows, scratch, staging, stream);
  scratch->first.Resize(rows);
  Launch<TargetKernel>(BlocksFor(rows), kThreads, 0, stream, z, ld, rows, target_dev, scratch->first.data());
  MS_CUDA_CHECK_LAUNCH(op);
  scratch->host.resize(rows);
  DownloadDoubles(op, scratch->first.data(), rows, scratch->host.data(), stream);
  for (int64_t r = 0; r < rows; ++r) {
    if (target[r] >= 0) out[r] = scratch->host[r];
  }
}

void CrossEntropyGrad(float* z, int64_t ld, int64_t rows, int64_t V, const double* lse, const int64_t* target,
                      float coef, CrossEntropyScratch* scratch, PinnedStaging* staging, cudaStream_t stream) {
  if (rows <= 0 || V <= 0) return;
  const char* op = "CrossEntropyGrad";
  const int64_t* target_dev = UploadTargets(op, target, rows, scratch, staging, stream);
  scratch->first.Resize(rows);
  MS_CUDA_CHECK(op, cudaMemcpyAsync(scratch->first.data(), staging->Stage(op, lse, rows), rows * sizeof(double),
                                    cudaMemcpyHostToDevice, stream));
  const unsigned col_blocks = static_cast<unsigned>(std::min<int64_t>((V + kThreads - 1) / kThreads, 1024));
  for (int64_t r0 = 0; r0 < rows; r0 += 65535) {  // gridDim.y is at most 65535
    const int64_t nr = std::min<int64_t>(65535, rows - r0);
    Launch<GradKernel>(dim3(col_blocks, static_cast<unsigned>(nr)), kThreads, 0, stream, z + r0 * ld, ld, V,
                       scratch->first.data() + r0, target_dev + r0, coef);
    MS_CUDA_CHECK_LAUNCH(op);
  }
}

int64_t HeadGroupRows(int64_t rows, int64_t V, int64_t elem_bytes, const HeadTiling& tiling) {
  const int64_t chunk = std::min(rows, std::max<int64_t>(1, tiling.chunk_rows));
  const int64_t chunks = std::max<int64_t>(1, tiling.group_bytes / (V * elem_bytes) / chunk);
  return std::min(rows, chunks * chunk);
}

void HeadLoss(const HeadLossArgs<float>& args, GemmRunner* gemm, CrossEntropyScratch* scratch, PinnedStaging* staging,
              cudaStream_t stream, const HeadTiling& tiling) {
  const int64_t rows = args.rows, V = args.vocab, d_e = args.d_e;
  if (rows <= 0) return;
  const char* op = "HeadLoss";
  const int64_t* target_dev = UploadTargets(op, args.target, rows, scratch, staging, stream);
  scratch->first.Resize(rows);
  scratch->second.Resize(rows);
  const int64_t chunk = std::min(rows, std::max<int64_t>(1, tiling.chunk_rows));
  const bool grad = args.dy != nullptr;
  const Precision precision = args.precision;
  if (precision == Precision::kFp32) {
    // With a backward the logits live in the ∂Z group's rows: one fp32 buffer.
    const int64_t group = grad ? HeadGroupRows(rows, V, sizeof(float), tiling) : chunk;
    scratch->logits.Resize(group * V);
    float* z = scratch->logits.data();
    HeadGroups<float>(args, args.y, args.e_bar, grad ? z : nullptr, z, target_dev, chunk, group, gemm, scratch,
                      stream);
  } else {
    // Each operand converted once: y, Ē (unless packed by the caller), the gradient rows by the row pass.
    scratch->y16.Resize(rows * d_e);
    gemm->Pack(precision, args.y, rows * d_e, scratch->y16.data());
    const uint16_t* e16 = nullptr;
    if (args.e_bar_packed != nullptr && args.e_bar_packed->precision == precision) {
      e16 = args.e_bar_packed->half.data();
    } else {
      scratch->e_bar16.Resize(V * d_e);
      gemm->Pack(precision, args.e_bar, V * d_e, scratch->e_bar16.data());
      e16 = scratch->e_bar16.data();
    }
    const int64_t group = grad ? HeadGroupRows(rows, V, sizeof(uint16_t), tiling) : chunk;
    scratch->logits.Resize(chunk * V);
    scratch->grad16.Resize(grad ? group * V : 0);
    HeadGroups<uint16_t>(args, scratch->y16.data(), e16, grad ? scratch->grad16.data() : nullptr,
                         scratch->logits.data(), target_dev, chunk, group, gemm, scratch, stream);
  }
  if (args.lse == nullptr) {  // the loss stays on the device until TakeHeadLoss
    if (scratch->loss_sum.size() == 0) {  // made once, zeroed: later each take zeroes it
      scratch->loss_sum.Resize(1);
      MS_CUDA_CHECK(op, cudaMemsetAsync(scratch->loss_sum.data(), 0, sizeof(double), stream));
    }
    Launch<MeanLossKernel>(1, 1, 0, stream, scratch->first.data(), scratch->second.data(), rows,
                           scratch->loss_sum.data());
    MS_CUDA_CHECK_LAUNCH(op);
    return;
  }
  MS_CUDA_CHECK(op, cudaMemcpyAsync(args.lse, scratch->first.data(), rows * sizeof(double), cudaMemcpyDeviceToHost,
                                    stream));
  DownloadDoubles(op, scratch->second.data(), rows, args.target_logit, stream);
}

double TakeHeadLoss(CrossEntropyScratch* scratch, cudaStream_t stream) {
  if (scratch->loss_sum.size() == 0) return 0.0;  // no HeadLoss has kept its loss yet
  const char* op = "TakeHeadLoss";
  double* host = static_cast<double*>(scratch->loss_read.Reserve(op, sizeof(double)));
  DownloadDoubles(op, scratch->loss_sum.data(), 1, host, stream);
  const double sum = *host;
  scratch->loss_read.Release();  // waited for: the same pinned double on every take
  MS_CUDA_CHECK(op, cudaMemsetAsync(scratch->loss_sum.data(), 0, sizeof(double), stream));
  return sum;
}

}  // namespace multiscreen::kernels::cuda
