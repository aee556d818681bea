#include "kernels/cuda/screening.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/mipe.h"
#include "kernels/cuda/check.h"

namespace multiscreen::kernels::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxDk = 64;
constexpr int kMaxDv = 256;

struct TileParams {
  float w;          // window (+inf: plain causal mask)
  float r;          // acceptance width
  float scale;      // e^{s_O}
  double rate;      // MiPE angle per position, π γ(w)/w
  int keys;         // ⌈w⌉ capped at T
};

// Unit rows of q, k (then MiPE) and v for every (token, tile): one thread each.
__global__ void NormalizeKernel(const float* P, int64_t B, int64_t T, int tiles, int dk, int dv, int64_t pos0,
                                const TileParams* params, float* qt, float* kt, float* vb) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= B * T * tiles) return;
  const int t = int(idx % tiles);
  const int64_t row = idx / tiles, b = row / T, i = row % T;
  const int C = 2 * dk + 2 * dv;
  const float* p = P + row * int64_t(tiles) * C + int64_t(t) * C;
  const int64_t out = ((b * tiles + t) * T + i);
  const double phi = double(pos0 + i) * params[t].rate;
  const float c = float(cos(phi)), s = float(sin(phi));
  for (int part = 0; part < 2; ++part) {
    const float* src = p + part * dk;
    float* dst = (part == 0 ? qt : kt) + out * dk;
    float sq = 0.f;
    for (int x = 0; x < dk; ++x) sq += src[x] * src[x];
    const float inv = 1.f / fmaxf(sqrtf(sq), 1e-12f);
    for (int x = 0; x < dk; ++x) dst[x] = src[x] * inv;
    const float z0 = dst[0], z1 = dst[1];
    dst[0] = z0 * c - z1 * s;
    dst[1] = z0 * s + z1 * c;
  }
  const float* v = p + 2 * dk;
  float sq = 0.f;
  for (int x = 0; x < dv; ++x) sq += v[x] * v[x];
  const float inv = 1.f / fmaxf(sqrtf(sq), 1e-12f);
  for (int x = 0; x < dv; ++x) vb[out * dv + x] = v[x] * inv;
}

// h_i = Σ_j α_ij m_ij v̄_j over the window, then U = scale · TanhNorm(h) ⊙ tanh(SiLU(g)).
__global__ void AggregateKernel(const float* P, int64_t B, int64_t T, int tiles, int dk, int dv,
                                const TileParams* params, const float* qt, const float* kt, const float* vb,
                                float* U) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= B * T * tiles) return;
  const int64_t i = idx % T;
  const int64_t bt = idx / T;  // b·tiles + t
  const int t = int(bt % tiles);
  const int64_t b = bt / tiles;
  const TileParams tp = params[t];
  const float* q = qt + (bt * T + i) * dk;
  float qr[kMaxDk];
  for (int x = 0; x < dk; ++x) qr[x] = q[x];
  float h[kMaxDv];
  for (int x = 0; x < dv; ++x) h[x] = 0.f;
  const int64_t j0 = i - tp.keys + 1 > 0 ? i - tp.keys + 1 : 0;
  for (int64_t j = j0; j <= i; ++j) {
    const float* k = kt + (bt * T + j) * dk;
    float s = 0.f;
    for (int x = 0; x < dk; ++x) s += qr[x] * k[x];
    const float a = 1.f - (1.f - s) / tp.r;
    if (a <= 0.f) continue;  // Trim: exactly zero relevance, no value work
    const float d = float(i - j);
    const float m = isinf(tp.w) ? 1.f : 0.5f * (cospif(d / tp.w) + 1.f);
    const float weight = a * a * m;
    const float* v = vb + (bt * T + j) * dv;
    for (int x = 0; x < dv; ++x) h[x] += weight * v[x];
  }
  float sq = 0.f;
  for (int x = 0; x < dv; ++x) sq += h[x] * h[x];
  const float n = sqrtf(sq);
  float f;
  if (n < 0.1f) {
    const float n2 = n * n;
    f = 1.f + n2 * (-1.f / 3 + n2 * (2.f / 15 + n2 * (-17.f / 315 + n2 * (62.f / 2835))));
  } else {
    f = tanhf(n) / n;
  }
  const int C = 2 * dk + 2 * dv;
  const float* g = P + (b * T + i) * int64_t(tiles) * C + int64_t(t) * C + 2 * dk + dv;
  float* out = U + (b * T + i) * int64_t(tiles) * dv + int64_t(t) * dv;
  for (int x = 0; x < dv; ++x) {
    const float sig = 1.f / (1.f + expf(-g[x]));
    out[x] = tp.scale * h[x] * f * tanhf(g[x] * sig);
  }
}

}  // namespace

absl::Status ScreeningForward(const cpu::ScreeningShape& shape, const float* P, const cpu::TileScalars* tiles,
                              float* q_tilde, float* k_tilde, float* v_bar, float* U, void* stream) {
  if (shape.d_k < 2 || shape.d_k > kMaxDk || shape.d_v > kMaxDv) {
    return absl::InvalidArgumentError(absl::StrCat("cuda::ScreeningForward: d_k = ", shape.d_k, ", d_v = ", shape.d_v,
                                                   " outside [2, ", kMaxDk, "] / [1, ", kMaxDv, "]"));
  }
  std::vector<TileParams> host(shape.tiles);
  for (int64_t t = 0; t < shape.tiles; ++t) {
    const cpu::TileScalars& s = tiles[t];
    host[t].w = static_cast<float>(s.w);
    host[t].r = static_cast<float>(s.r);
    host[t].scale = static_cast<float>(s.scale);
    // The Softmask reaches ⌈w⌉ keys (all T for an infinite window), as cpu::SoftmaskKeys.
    host[t].keys = static_cast<int>(std::isinf(s.w) ? shape.seq : std::min<double>(std::ceil(s.w), double(shape.seq)));
    double rate_dw;
    cpu::MipeRate(s.mipe_w, shape.w_th, &host[t].rate, &rate_dw);
  }
  TileParams* device = nullptr;
  MS_CUDA_RETURN_IF_ERROR(cudaMalloc(&device, host.size() * sizeof(TileParams)));
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  MS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device, host.data(), host.size() * sizeof(TileParams),
                                          cudaMemcpyHostToDevice, st));
  const int64_t n = shape.batch * shape.seq * shape.tiles;
  const unsigned blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
  NormalizeKernel<<<blocks, kThreads, 0, st>>>(P, shape.batch, shape.seq, int(shape.tiles), int(shape.d_k),
                                               int(shape.d_v), shape.pos0, device, q_tilde, k_tilde, v_bar);
  AggregateKernel<<<blocks, kThreads, 0, st>>>(P, shape.batch, shape.seq, int(shape.tiles), int(shape.d_k),
                                               int(shape.d_v), device, q_tilde, k_tilde, v_bar, U);
  const cudaError_t launch = cudaGetLastError();
  cudaStreamSynchronize(st);
  cudaFree(device);
  MS_CUDA_RETURN_IF_ERROR(launch);
  return absl::OkStatus();
}

}  // namespace multiscreen::kernels::cuda
