// Causal attention on a CUDA device (attention.h). Warps of kWarpsPerBlock per block;
// warp w of the grid owns row g = (b·heads + h)·T + t of the [B, heads, T] index
// (a query in the forward and for ∂q, a key for ∂k and ∂v); lane l holds the head's
// columns l, l + 32, …; each score is a fixed-order warp sum in fp64.
#include "kernels/cuda/attention.h"

#include <math_constants.h>

#include <string>

#include "kernels/cuda/attention_row.cuh"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.h"

namespace multiscreen::kernels::cuda {
namespace {

using namespace attention_row;  // kWarp, kPerLane, the row functions and the weight map

constexpr int kWarpsPerBlock = 8;

// Where warp row g's vectors start, and its (b, h) pair's.
struct RowIndex {
  int64_t bh, t, base;  // base: the (b, h) pair's row 0, column h·d_h, in q/k/v/o
};

__device__ inline RowIndex IndexOf(int64_t g, int64_t T, int64_t H, int64_t dh) {
  RowIndex r;
  r.bh = g / T;
  r.t = g % T;
  const int64_t b = r.bh / H, h = r.bh % H;
  r.base = b * T * H * dh + h * dh;
  return r;
}

// One warp per query: the weights over keys 0..i, then o_i and the row statistic.
__global__ void ForwardKernel(const float* q, const float* k, const float* v, const double* scale, float* o,
                              double* lse, int64_t rows, int64_t T, int64_t H, int64_t dh, AttentionKind kind,
                              int64_t sigmoid_bias_length) {
  const int64_t g = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (g >= rows) return;
  const RowIndex r = IndexOf(g, T, H, dh);
  const int64_t ld = H * dh;
  const double sc = scale[r.bh % H] * LengthFactor(kind, r.t);
  double qi[kPerLane], acc[kPerLane];
  LoadRow(q + r.base + r.t * ld, dh, qi);
  const double stat = AttendQuery(qi, k, v, r.base, r.t, ld, dh, sc, kind, sigmoid_bias_length, acc);
  StoreRow(acc, dh, o + r.base + r.t * ld);
  if (threadIdx.x == 0) lse[g] = stat;
}

// The row constant D_i, one warp per query: softmax kinds ∂L/∂o_i · o_i; entmax
// Σ_j √p_ij dp_ij / Σ_j √p_ij (a pass over the keys); sigmoid 0 (unused).
__global__ void DeltaKernel(const float* q, const float* k, const float* v, const float* o, const float* d_o,
                            const double* lse, const double* scale, double* delta, int64_t rows, int64_t T, int64_t H,
                            int64_t dh, AttentionKind kind) {
  const int64_t g = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (g >= rows) return;
  const RowIndex r = IndexOf(g, T, H, dh);
  const int64_t ld = H * dh;
  double doi[kPerLane];
  LoadRow(d_o + r.base + r.t * ld, dh, doi);
  double d = 0;
  if (SoftmaxLike(kind)) {
    d = WarpDot(doi, o + r.base + r.t * ld, dh);
  } else if (kind == AttentionKind::kEntmax15) {
    double qi[kPerLane];
    LoadRow(q + r.base + r.t * ld, dh, qi);
    const double sc = scale[r.bh % H], tau = lse[g];
    double gdp = 0, gsum = 0;
    for (int64_t j = 0; j <= r.t; ++j) {
      const double t = 0.5 * sc * WarpDot(qi, k + r.base + j * ld, dh) - tau;
      const double dp = WarpDot(doi, v + r.base + j * ld, dh);
      if (t > 0) gdp += t * dp, gsum += t;
    }
    d = gdp / gsum;
  }
  if (threadIdx.x == 0) delta[g] = d;
}

// One warp per query i: ∂q_i = scale Σ_{j≤i} ∂L/∂s_ij k_j and parts_i = Σ_j ∂L/∂s_ij q_i·k_j,
// with ∂L/∂s_ij = p_ij (∂L/∂o_i·v_j − D_i).
__global__ void QueryGradKernel(const float* q, const float* k, const float* v, const float* d_o, const double* lse,
                                const double* delta, const double* scale, float* dq, double* parts, int64_t rows,
                                int64_t T, int64_t H, int64_t dh, AttentionKind kind) {
  const int64_t g = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (g >= rows) return;
  const RowIndex r = IndexOf(g, T, H, dh);
  const int64_t ld = H * dh;
  const double lambda = LengthFactor(kind, r.t), sc = scale[r.bh % H] * lambda, lse_i = lse[g], d_i = delta[g];
  double qi[kPerLane], doi[kPerLane], gq[kPerLane];
  LoadRow(q + r.base + r.t * ld, dh, qi);
  LoadRow(d_o + r.base + r.t * ld, dh, doi);
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) gq[u] = 0;
  double g_scale = 0;
  for (int64_t j = 0; j <= r.t; ++j) {
    const float* kj = k + r.base + j * ld;
    const double dot = WarpDot(qi, kj, dh);
    const double p = Weight(kind, sc * dot, lse_i);
    const double ds = ScoreGrad(kind, p, WarpDot(doi, v + r.base + j * ld, dh), d_i);
    g_scale += ds * lambda * dot;
    const double gs = sc * ds;
#pragma unroll
    for (int u = 0; u < kPerLane; ++u) {
      const int64_t c = threadIdx.x + int64_t(u) * kWarp;
      if (c < dh) gq[u] += gs * double(kj[c]);
    }
  }
  StoreRow(gq, dh, dq + r.base + r.t * ld);
  if (threadIdx.x == 0) parts[g] = g_scale;
}

// One warp per key j: ∂k_j = scale Σ_{i≥j} ∂L/∂s_ij q_i and ∂v_j = Σ_{i≥j} p_ij ∂L/∂o_i.
__global__ void KeyValueGradKernel(const float* q, const float* k, const float* v, const float* d_o,
                                   const double* lse, const double* delta, const double* scale, float* dk, float* dv,
                                   int64_t rows, int64_t T, int64_t H, int64_t dh, AttentionKind kind) {
  const int64_t g = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (g >= rows) return;
  const RowIndex r = IndexOf(g, T, H, dh);
  const int64_t ld = H * dh;
  const double scale_h = scale[r.bh % H];
  double kj[kPerLane], vj[kPerLane], gk[kPerLane], gv[kPerLane];
  LoadRow(k + r.base + r.t * ld, dh, kj);
  LoadRow(v + r.base + r.t * ld, dh, vj);
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) gk[u] = gv[u] = 0;
  for (int64_t i = r.t; i < T; ++i) {
    const float* qi = q + r.base + i * ld;
    const float* doi = d_o + r.base + i * ld;
    const double sc = scale_h * LengthFactor(kind, i);
    const double p = Weight(kind, sc * WarpDot(kj, qi, dh), lse[r.bh * T + i]);
    const double ds = ScoreGrad(kind, p, WarpDot(vj, doi, dh), delta[r.bh * T + i]);
    const double gs = sc * ds;
#pragma unroll
    for (int u = 0; u < kPerLane; ++u) {
      const int64_t c = threadIdx.x + int64_t(u) * kWarp;
      if (c < dh) {
        gk[u] += gs * double(qi[c]);
        gv[u] += p * double(doi[c]);
      }
    }
  }
  StoreRow(gk, dh, dk + r.base + r.t * ld);
  StoreRow(gv, dh, dv + r.base + r.t * ld);
}

// d_scale[h] = Σ_{b, i} parts[(b·H + h)·T + i]: block h, strided per-thread sums in
// order, then BlockSum's fixed tree.
__global__ void ScaleGradKernel(const double* parts, int64_t B, int64_t T, int64_t H, double* d_scale) {
  const int64_t h = blockIdx.x;
  double acc = 0;
  for (int64_t n = threadIdx.x; n < B * T; n += kThreads) acc += parts[((n / T) * H + h) * T + n % T];
  acc = BlockSum(acc);
  if (threadIdx.x == 0) d_scale[h] = acc;
}

dim3 WarpGrid(int64_t rows) { return dim3(static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock)); }

// Fatal (one line) unless the kernels take heads of width d_h.
void CheckHeadWidth(const char* op, int64_t dh) {
  if (dh < 1 || dh > kMaxHeadWidth) {
    const std::string message = "head width d_h = " + std::to_string(dh) + " is outside the kernel's 1.." +
                                std::to_string(kMaxHeadWidth);
    FatalCudaError(op, message.c_str());
  }
}

// dst[0, n) (device) ← host[0, n), enqueued on stream (the host array may change after).
void UploadDoubles(const char* op, const double* host, int64_t n, DeviceArray<double>* dst, cudaStream_t stream) {
  dst->Resize(n);
  MS_CUDA_CHECK(op, cudaMemcpyAsync(dst->data(), host, n * sizeof(double), cudaMemcpyHostToDevice, stream));
}

// host[0, n) ← src[0, n) (device), waiting for it.
void DownloadDoubles(const char* op, const double* src, int64_t n, double* host, cudaStream_t stream) {
  MS_CUDA_CHECK(op, cudaMemcpyAsync(host, src, n * sizeof(double), cudaMemcpyDeviceToHost, stream));
  MS_CUDA_CHECK(op, cudaStreamSynchronize(stream));
}

}  // namespace

void AttentionForward(const cpu::AttentionShape& shape, const float* q, const float* k, const float* v,
                      const double* scale, float* o, double* lse, AttentionScratch* scratch, cudaStream_t stream) {
  const int64_t rows = shape.batch * shape.heads * shape.seq;
  if (rows <= 0) return;
  CheckHeadWidth("AttentionForward", shape.d_h);
  UploadDoubles("AttentionForward", scale, shape.heads, &scratch->scale, stream);
  scratch->lse.Resize(rows);
  Launch<ForwardKernel>(WarpGrid(rows), dim3(kWarp, kWarpsPerBlock), 0, stream, q, k, v,
                        scratch->scale.data(), o, scratch->lse.data(), rows, shape.seq, shape.heads, shape.d_h,
                        shape.kind, shape.sigmoid_bias_length);
  MS_CUDA_CHECK_LAUNCH("AttentionForward");
  DownloadDoubles("AttentionForward", scratch->lse.data(), rows, lse, stream);
}

bool AttentionBackwardBegin(const cpu::AttentionShape& shape, const double* lse, const double* scale,
                            double* d_scale, AttentionScratch* scratch, cudaStream_t stream) {
  const int64_t rows = shape.batch * shape.heads * shape.seq, H = shape.heads;
  if (rows <= 0) {
    for (int64_t h = 0; h < H; ++h) d_scale[h] = 0;
    return false;
  }
  CheckHeadWidth("AttentionBackward", shape.d_h);
  UploadDoubles("AttentionBackward", scale, H, &scratch->scale, stream);
  UploadDoubles("AttentionBackward", lse, rows, &scratch->lse, stream);
  scratch->delta.Resize(rows);
  scratch->parts.Resize(rows);
  scratch->d_scale.Resize(H);
  return true;
}

void AttentionBackwardFinish(const cpu::AttentionShape& shape, double* d_scale, AttentionScratch* scratch,
                             cudaStream_t stream) {
  Launch<ScaleGradKernel>(static_cast<unsigned>(shape.heads), kThreads, 0, stream, scratch->parts.data(), shape.batch,
                          shape.seq, shape.heads, scratch->d_scale.data());
  MS_CUDA_CHECK_LAUNCH("AttentionBackward");
  DownloadDoubles("AttentionBackward", scratch->d_scale.data(), shape.heads, d_scale, stream);
}

void AttentionBackward(const cpu::AttentionShape& shape, const float* q, const float* k, const float* v,
                       const float* o, const double* lse, const float* d_o, const double* scale, float* dq, float* dk,
                       float* dv, double* d_scale, AttentionScratch* scratch, cudaStream_t stream) {
  if (!AttentionBackwardBegin(shape, lse, scale, d_scale, scratch, stream)) return;
  const int64_t rows = shape.batch * shape.heads * shape.seq, T = shape.seq, H = shape.heads, dh = shape.d_h;
  const dim3 grid = WarpGrid(rows), block(kWarp, kWarpsPerBlock);
  Launch<DeltaKernel>(grid, block, 0, stream, q, k, v, o, d_o, scratch->lse.data(), scratch->scale.data(),
                      scratch->delta.data(), rows, T, H, dh, shape.kind);
  MS_CUDA_CHECK_LAUNCH("AttentionBackward");
  Launch<QueryGradKernel>(grid, block, 0, stream, q, k, v, d_o, scratch->lse.data(), scratch->delta.data(),
                          scratch->scale.data(), dq, scratch->parts.data(), rows, T, H, dh, shape.kind);
  MS_CUDA_CHECK_LAUNCH("AttentionBackward");
  Launch<KeyValueGradKernel>(grid, block, 0, stream, q, k, v, d_o, scratch->lse.data(), scratch->delta.data(),
                             scratch->scale.data(), dk, dv, rows, T, H, dh, shape.kind);
  MS_CUDA_CHECK_LAUNCH("AttentionBackward");
  AttentionBackwardFinish(shape, d_scale, scratch, stream);
}

}  // namespace multiscreen::kernels::cuda
