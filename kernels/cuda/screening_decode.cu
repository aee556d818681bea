// The kernels of screening's decoding step on a CUDA device (screening_decode.h).
#include "kernels/cuda/screening_decode.h"

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_math.cuh"

namespace multiscreen::kernels::cuda {
namespace {

constexpr int kBlock = 128;                  // threads of ScreenDecodeKernel: one key each per round
constexpr int kMaxDk = 64, kMaxDv = 256;
constexpr int kColumns = kMaxDv / kBlock;    // value columns a thread sums, at most
constexpr float kFloor = 1e-12f;             // cpu::kUnitNormFloor

// Keys unit u holds once the token at `pos` is cached: min(pos + 1, cap), or pos + 1.
__device__ inline int64_t KeysOf(const ScreenDecodeUnit& u, int64_t pos) {
  return u.cap == 0 || pos + 1 < u.cap ? pos + 1 : u.cap;
}

// The slot of the key at distance d from `pos`.
__device__ inline int64_t SlotOf(const ScreenDecodeUnit& u, int64_t pos, int64_t d) {
  return u.cap == 0 ? pos - d : (pos - d) % u.ring;
}

// Spec step 5 on one row: y = x / max(‖x‖, floor), fp32 sums in column order.
__device__ inline void UnitRow(const float* x, float* y, int d) {
  float sq = 0.f;
  for (int c = 0; c < d; ++c) sq += x[c] * x[c];
  const float n = sqrtf(sq);
  const float inv = 1.f / (n < kFloor ? kFloor : n);  // NaN stays NaN
  for (int c = 0; c < d; ++c) y[c] = x[c] * inv;
}

// Spec step 6 at position `pos`, angles in fp64 (as cpu::PositionRotateForward): MiPE's
// coordinates (0, 1) by pos · rate, or position ROPE's pairs (p, p + d/2) by pos · θ'_p.
__device__ inline void TurnRow(float* z, const ScreenDecodeDims& s, double rate, int64_t pos) {
  if (rate != 0) {
    const double phi = double(pos) * rate, c = cos(phi), sn = sin(phi), z0 = z[0], z1 = z[1];
    z[0] = static_cast<float>(z0 * c - z1 * sn);
    z[1] = static_cast<float>(z0 * sn + z1 * c);
  } else if (s.rope_freq != nullptr) {
    const int half = s.d_k / 2;
    for (int p = 0; p < half; ++p) {
      const double phi = double(pos) * s.rope_freq[p], c = cos(phi), sn = sin(phi), a = z[p], b = z[p + half];
      z[p] = static_cast<float>(a * c - b * sn);
      z[p + half] = static_cast<float>(a * sn + b * c);
    }
  }
}

// Caches the token's k̃ (normalized, turned at pos) and v̄ (normalized) in its slot; p is
// unit u's [q | k | v | g].
__device__ inline void CacheKey(const ScreenDecodeDims& s, const ScreenDecodeUnit& u, const float* p, int64_t pos) {
  const int dk = s.d_k, dv = s.d_v;
  const int64_t new_slot = SlotOf(u, pos, 0);
  float* k = u.k + new_slot * dk;
  UnitRow(p + dk, k, dk);
  TurnRow(k, s, u.rate, pos);
  UnitRow(p + 2 * dk, u.v + new_slot * dv, dv);
}

// A chunk's keys before its queries: a thread per (unit, row).
__global__ void ScreenDecodeKeysKernel(ScreenDecodeDims s, const float* P, int64_t ldp, int64_t rows,
                                       const ScreenDecodeUnit* units, int64_t pos0) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * s.tiles) return;
  const int64_t r = i / s.tiles, t = i % s.tiles;
  CacheKey(s, units[t], P + r * ldp + t * s.p_cols, pos0 + r);
}

// Row blockIdx.z (position pos0 + z) of unit blockIdx.x over key block blockIdx.y; with
// cache_key (one row) the block of distance 0 caches the row's key and value first.
__global__ void ScreenDecodeKernel(ScreenDecodeDims s, const float* P, int64_t ldp, const ScreenDecodeUnit* units,
                                   int64_t pos0, bool cache_key, float* partial) {
  const int64_t t = blockIdx.x, block = blockIdx.y, row = blockIdx.z, pos = pos0 + row;
  const ScreenDecodeUnit u = units[t];
  const int dk = s.d_k, dv = s.d_v;
  __shared__ float q[kMaxDk];
  __shared__ float weight[kBlock];
  __shared__ int64_t slot[kBlock];
  if (threadIdx.x == 0) {
    const float* p = P + row * ldp + t * s.p_cols;  // [q | k | v | g] of unit t
    UnitRow(p, q, dk);
    TurnRow(q, s, u.rate, pos);
    if (cache_key && block == 0) CacheKey(s, u, p, pos);  // the block of distance 0
  }
  __syncthreads();
  float acc[kColumns];
#pragma unroll
  for (int i = 0; i < kColumns; ++i) acc[i] = 0.f;
  const int64_t keys = KeysOf(u, pos), d0 = block * s.keys_per_block;
  const int64_t d1 = keys < d0 + s.keys_per_block ? keys : d0 + s.keys_per_block;
  for (int64_t round = d0; round < d1; round += kBlock) {
    // Each thread scores the key at distance d (steps 7–9): α = Trim(q̃·k̃)², times m(d).
    const int64_t d = round + threadIdx.x;
    float w = 0.f;
    int64_t j = 0;
    if (d < d1) {
      j = SlotOf(u, pos, d);
      const float* k = u.k + j * dk;
      float dot = 0.f;
      for (int c = 0; c < dk; ++c) dot += q[c] * k[c];
      const float a = 1.f - (1.f - dot) / u.r;
      w = a <= 0.f ? 0.f : a * a * (u.mask != nullptr ? u.mask[d] : 1.f);  // NaN stays NaN
    }
    weight[threadIdx.x] = w;
    slot[threadIdx.x] = j;
    __syncthreads();
    // Step 10 over this round's keys: the accepted ones' v̄, each thread its columns.
    const int64_t n = d1 - round < kBlock ? d1 - round : kBlock;
    for (int64_t i = 0; i < n; ++i) {
      const float wi = weight[i];
      if (wi == 0.f) continue;  // rejected (or beyond the window): no value work
      const float* v = u.v + slot[i] * dv;
#pragma unroll
      for (int x = 0; x < kColumns; ++x) {
        const int c = threadIdx.x + x * kBlock;
        if (c < dv) acc[x] += wi * v[c];
      }
    }
    __syncthreads();
  }
  float* out = partial + ((row * s.tiles + t) * s.blocks + block) * dv;
#pragma unroll
  for (int x = 0; x < kColumns; ++x) {
    const int c = threadIdx.x + x * kBlock;
    if (c < dv) out[c] = acc[x];
  }
}

// A block of kThreads per unit: h = Σ of the unit's partials in block order, then
// U = scale · TanhNorm(h) ⊙ tanh(SiLU(g)) (steps 11–13).
__global__ void ScreenDecodeOutputKernel(ScreenDecodeDims s, const float* P, int64_t ldp,
                                         const ScreenDecodeUnit* units, const float* partial, float* U,
                                         int64_t ldu) {
  const int64_t t = blockIdx.x, row = blockIdx.y;
  const int c = threadIdx.x, dv = s.d_v;
  P += row * ldp;
  U += row * ldu;
  partial += row * s.tiles * s.blocks * dv;
  float h = 0.f;
  if (c < dv) {
    for (int64_t b = 0; b < s.blocks; ++b) h += partial[(t * s.blocks + b) * dv + c];
  }
  const double sq = BlockSum(c < dv ? double(h) * double(h) : 0.0);
  float f = 1.f, unused;
  if (s.tanh_norm) TanhNormScale(sqrtf(static_cast<float>(sq)), &f, &unused);
  if (c >= dv) return;
  float gate = 1.f, gate_dg;
  if (s.gate) GateForwardAndDerivative(P[t * s.p_cols + 2 * s.d_k + dv + c], &gate, &gate_dg);
  U[t * dv + c] = units[t].scale * h * f * gate;
}

}  // namespace

void ScreenDecodeRows(const ScreenDecodeDims& dims, const float* P, int64_t ldp, int64_t rows,
                      const ScreenDecodeUnit* units, int64_t pos0, float* partial, float* U, int64_t ldu,
                      cudaStream_t stream) {
  if (dims.tiles <= 0 || rows <= 0) return;
  const bool one_row = rows == 1;
  if (!one_row) {
    const int64_t threads = rows * dims.tiles;
    Launch<ScreenDecodeKeysKernel>(dim3(static_cast<unsigned>((threads + kBlock - 1) / kBlock)), dim3(kBlock), 0,
                                   stream, dims, P, ldp, rows, units, pos0);
    MS_CUDA_CHECK_LAUNCH("ScreeningCache::StepRows");
  }
  Launch<ScreenDecodeKernel>(dim3(static_cast<unsigned>(dims.tiles), static_cast<unsigned>(dims.blocks),
                                  static_cast<unsigned>(rows)),
                             dim3(kBlock), 0, stream, dims, P, ldp, units, pos0, one_row, partial);
  MS_CUDA_CHECK_LAUNCH("ScreeningCache::Step");
  Launch<ScreenDecodeOutputKernel>(dim3(static_cast<unsigned>(dims.tiles), static_cast<unsigned>(rows)),
                                   dim3(kThreads), 0, stream, dims, P, ldp, units, static_cast<const float*>(partial),
                                   U, ldu);
  MS_CUDA_CHECK_LAUNCH("ScreeningCache::Step");
}

}  // namespace multiscreen::kernels::cuda
