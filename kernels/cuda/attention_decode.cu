// The Transformer's decoding step on a CUDA device (attention_decode.h).
#include "kernels/cuda/attention_decode.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_row.cuh"
#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/table_stream.h"
#include "kernels/device_array.h"

namespace multiscreen::kernels::cuda {
namespace {

using namespace attention_row;  // kWarp, kPerLane, the row functions, AttendQuery

constexpr int kWarpsPerBlock = 8;   // heads per block
constexpr int64_t kFirstRows = 64;  // positions the cache starts with
constexpr float kFloor = 1e-12f;    // cpu::kUnitNormFloor

// Σ_u x[u]² over the warp's columns, in fp32 (every lane gets it).
__device__ inline float WarpSquares(const float* x, int64_t dh) {
  float part = 0.f;
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) {
    if (threadIdx.x + int64_t(u) * kWarp < dh) part += x[u] * x[u];
  }
  return WarpSum(part);
}

// A warp per (head h, row blockIdx.y): q_h, k_h of the row's token at pos = pos0 + row
// turned (and made unit); with store, k_h and v_h stored in row pos of K and V; with
// attend, o_h over rows 0..pos. A single token does both in one launch; a chunk's rows
// store every row first (one launch), then attend (another), so that each row reads the
// chunk's earlier keys — the same operations, so Step's bits.
__global__ void AttentionDecodeKernel(const float* qkv, int64_t ldqkv, const double* freq, const double* scale,
                                      float* K, float* V, float* o, int64_t ldo, int64_t pos0, int64_t H, int64_t dh,
                                      AttentionKind kind, int64_t sigmoid_bias_length, bool qk_norm, bool store,
                                      bool attend) {
  const int64_t h = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.y, row = blockIdx.y, pos = pos0 + row;
  if (h >= H) return;
  qkv += row * ldqkv;
  o += row * ldo;
  const int64_t dl = H * dh, half = dh / 2, base = h * dh;
  const float* q = qkv + base;
  const float* k = qkv + dl + base;
  const float* v = qkv + 2 * dl + base;
  float qt[kPerLane], kt[kPerLane];
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) {  // RoPE: column c < d_h/2 pairs with c + d_h/2
    const int64_t c = threadIdx.x + int64_t(u) * kWarp;
    qt[u] = kt[u] = 0.f;
    if (c >= dh) continue;
    const int64_t p = c < half ? c : c - half;
    const double phi = double(pos) * freq[p];
    const float cs = static_cast<float>(cos(phi)), sn = static_cast<float>(sin(phi));
    if (c < half) {
      qt[u] = q[c] * cs - q[c + half] * sn;
      kt[u] = k[c] * cs - k[c + half] * sn;
    } else {
      qt[u] = q[c - half] * sn + q[c] * cs;
      kt[u] = k[c - half] * sn + k[c] * cs;
    }
  }
  if (qk_norm) {  // unit(RoPE(q)), unit(RoPE(k))
    const float nq = sqrtf(WarpSquares(qt, dh)), nk = sqrtf(WarpSquares(kt, dh));
    const float iq = 1.f / (nq < kFloor ? kFloor : nq), ik = 1.f / (nk < kFloor ? kFloor : nk);
#pragma unroll
    for (int u = 0; u < kPerLane; ++u) qt[u] *= iq, kt[u] *= ik;
  }
  double qi[kPerLane], acc[kPerLane];
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) {
    const int64_t c = threadIdx.x + int64_t(u) * kWarp;
    qi[u] = double(qt[u]);
    if (store && c < dh) {
      K[pos * dl + base + c] = kt[u];
      V[pos * dl + base + c] = v[c];
    }
  }
  if (!attend) return;
  __syncwarp();  // the warp's row of K and V is written before its lanes read it
  const double sc = scale[h] * LengthFactor(kind, pos);
  AttendQuery(qi, K, V, base, pos, dl, dh, sc, kind, sigmoid_bias_length, acc);
  StoreRow(acc, dh, o + base);
}

class CudaAttentionCache final : public AttentionCache<float> {
 public:
  explicit CudaAttentionCache(const AttentionCacheShape& shape) : shape_(shape) {
    std::vector<double> freq(shape.d_h / 2);
    cpu::RopeFrequencies(shape.d_h, shape.rope_scaling, freq.data());
    freq_.Resize(static_cast<int64_t>(freq.size()));
    freq_.CopyFromHost(freq.data());
    scale_.Resize(shape.heads);
    scale_.CopyFromHost(shape.scale.data());
  }

  void Step(const float* qkv, int64_t pos, float* o) override {
    const int64_t dl = shape_.heads * shape_.d_h;
    StepRows(qkv, 3 * dl, 1, pos, o, dl);
  }

  void StepRows(const float* qkv, int64_t ldqkv, int64_t rows, int64_t pos0, float* o, int64_t ldo) override {
    if (rows <= 0) return;
    const int64_t dl = shape_.heads * shape_.d_h, last = pos0 + rows - 1;
    if (last + 1 > rows_) {  // keeps the rows held so far
      rows_ = std::max({last + 1, 2 * rows_, kFirstRows});
      k_.Resize(rows_ * dl);
      v_.Resize(rows_ * dl);
    }
    // Launches of at most kDecodeRows rows (the grid's y), two each: every row's key and
    // value, then the rows' outputs; a single row both in one.
    for (int64_t first = 0; first < rows; first += kDecodeRows) {
      const int64_t n = std::min(kDecodeRows, rows - first);
      const dim3 grid(static_cast<unsigned>((shape_.heads + kWarpsPerBlock - 1) / kWarpsPerBlock),
                      static_cast<unsigned>(n));
      auto launch = [&](bool store, bool attend) {
        Launch<AttentionDecodeKernel>(grid, dim3(kWarp, kWarpsPerBlock), 0, TableStream(), qkv + first * ldqkv, ldqkv,
                                      static_cast<const double*>(freq_.data()),
                                      static_cast<const double*>(scale_.data()), k_.data(), v_.data(),
                                      o + first * ldo, ldo, pos0 + first, shape_.heads, shape_.d_h, shape_.kind,
                                      shape_.sigmoid_bias_length, shape_.qk_norm, store, attend);
        MS_CUDA_CHECK_LAUNCH("AttentionCache::Step");
      };
      if (n == 1) {
        launch(true, true);
      } else {
        launch(true, false);
        launch(false, true);
      }
    }
  }

 private:
  AttentionCacheShape shape_;
  int64_t rows_ = 0;  // positions K and V hold
  DeviceArray<float> k_{Device::kCuda}, v_{Device::kCuda};
  DeviceArray<double> freq_{Device::kCuda}, scale_{Device::kCuda};
};

}  // namespace

absl::StatusOr<std::unique_ptr<AttentionCache<float>>> MakeCudaAttentionCache(const AttentionCacheShape& shape) {
  if (shape.d_h < 2 || shape.d_h % 2 != 0 || shape.d_h > kMaxHeadWidth) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA attention decode: head width d_h = ", shape.d_h,
                                                   " is not even in 2..", kMaxHeadWidth));
  }
  if (shape.kind == AttentionKind::kScreening || static_cast<int64_t>(shape.scale.size()) != shape.heads) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA attention decode: attention ", AttentionKindName(shape.kind),
                                                   " with ", shape.scale.size(), " scales for ", shape.heads, " heads"));
  }
  return std::unique_ptr<AttentionCache<float>>(new CudaAttentionCache(shape));
}

}  // namespace multiscreen::kernels::cuda
