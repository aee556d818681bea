// Screening forward tiled on tensor cores (screening_tiled.h): the simple kernel's
// normalize pass (ScreeningNormalize) and a flash-style aggregate pass, mma.sync m16n8k16 bf16.
#include "kernels/cuda/screening_tiled.h"

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/screening_tables.h"
#include "kernels/cuda/tensor_core.cuh"

namespace multiscreen::kernels::cuda {
namespace {

constexpr int kDk = 16;                     // d_K: one m16n8k16 k-step
constexpr int kDv = 64;                     // d_V: 8 n-tiles of 8
constexpr int kWarps = 4;
constexpr int kThreadsPerCta = 32 * kWarps;
constexpr int kBlockQ = 16 * kWarps;        // queries per CTA, 16 per warp
constexpr int kBlockK = 64;                 // keys per staged block, 4 steps of 16
static_assert(kBlockQ == kBlockK, "StageUnitRows stages kBlockK rows of q̃ as of k̃");
constexpr int kStrideK = kDk + 8;           // bf16 per shared row of q̃, k̃: 48 bytes
constexpr int kStrideV = kDv + 8;           // bf16 per shared row of v̄: 144 bytes
constexpr int kCtasPerSm = 4;               // occupancy designed for: ≤ 128 registers per thread

// Sizes the kernels read; tokens of a (b, tile) task lie at (b·tiles + t)·T + i in the
// saved arrays and at row b·T + i of P and U (screening.cu's Dims).
struct TiledDims {
  int64_t batch, seq, tiles, pos0, mask_ld;
  bool tanh_norm;
  __host__ __device__ int64_t p_cols() const { return 2 * kDk + 2 * kDv; }
};

// ---- Pass 2: steps 7–13 on tensor cores ------------------------------------------

__device__ inline uint16_t Bf16Bits(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
__device__ inline float Bf16Value(uint16_t bits) {
  return __bfloat162float(__ushort_as_bfloat16(bits));
}
// Two floats as one bf16 pair register, `low` in the low 16 bits (the fragments' order).
__device__ inline uint32_t PackBf16(float low, float high) {
  return uint32_t(Bf16Bits(low)) | uint32_t(Bf16Bits(high)) << 16;
}

// Rows [row0, row0 + rows) of a [·, kDk] fp32 array into shared bf16 hi (and lo = the
// rounding remainder, when kSplit) at kStrideK; rows at or past `valid` are zeros.
// Every thread of the CTA calls it.
template <bool kSplit>
__device__ inline void StageUnitRows(const float* src, int64_t row0, int64_t valid, uint16_t* hi, uint16_t* lo) {
  for (int e = threadIdx.x; e < kBlockK * (kDk / 4); e += kThreadsPerCta) {
    const int r = e / (kDk / 4), c = 4 * (e % (kDk / 4));
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (row0 + r < valid) x = *reinterpret_cast<const float4*>(src + (row0 + r) * kDk + c);
    const float xs[4] = {x.x, x.y, x.z, x.w};
    #pragma unroll
    for (int u = 0; u < 4; ++u) {
      const uint16_t h = Bf16Bits(xs[u]);
      hi[r * kStrideK + c + u] = h;
      if (kSplit) lo[r * kStrideK + c + u] = Bf16Bits(xs[u] - Bf16Value(h));
    }
  }
}

// One CTA: queries [q0, q0 + 64) of task (b, t); see screening_tiled.h for the scheme.
// Warp w owns queries qw = q0 + 16w …; lane = 4g + u (g = groupID, u = threadID_in_group)
// holds, per n-tile of 8 columns, rows qw + g and qw + g + 8, columns 2u and 2u + 1 of
// each accumulator (the C/D fragment of tensor_core.cuh).
template <bool kSplit>
__global__ void __launch_bounds__(kThreadsPerCta, kCtasPerSm) TiledAggregateKernel(TiledDims s, const float* P,
                                                                       const ScreeningTileParams* params,
                                                                       const float* mask,
                                                                       ScreeningSaved<float> saved, float* U) {
  __shared__ __align__(16) uint16_t q_hi[kBlockQ * kStrideK];
  __shared__ __align__(16) uint16_t q_lo[kSplit ? kBlockQ * kStrideK : 8];
  __shared__ __align__(16) uint16_t k_hi[kBlockK * kStrideK];
  __shared__ __align__(16) uint16_t k_lo[kSplit ? kBlockK * kStrideK : 8];
  __shared__ __align__(16) uint16_t v_s[kBlockK * kStrideV];

  const int64_t T = s.seq, t = blockIdx.y, b = blockIdx.z, bt = b * s.tiles + t;
  const int64_t q0 = int64_t(blockIdx.x) * kBlockQ;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, u = lane % 4;
  const int64_t qw = q0 + 16 * warp;
  const ScreeningTileParams tp = params[t];
  const int64_t keys = tp.keys;  // min(⌈w⌉, T): key j reaches query i iff 0 ≤ i − j < keys
  const float* m = mask + t * s.mask_ld;
  const float* q_tilde = saved.q_tilde + bt * T * kDk;
  const float* k_tilde = saved.k_tilde + bt * T * kDk;
  const float* v_bar = saved.v_bar + bt * T * kDv;

  StageUnitRows<kSplit>(q_tilde, q0, T, q_hi, q_lo);
  __syncthreads();
  // The warp's A fragments of q̃ (16 queries × d_K), held for the whole walk.
  uint32_t qa_hi[4], qa_lo[4] = {0, 0, 0, 0};
  LdmatrixX4(qa_hi, &q_hi[(16 * warp + lane % 16) * kStrideK + 8 * (lane / 16)]);
  if (kSplit) LdmatrixX4(qa_lo, &q_lo[(16 * warp + lane % 16) * kStrideK + 8 * (lane / 16)]);

  float h[kDv / 8][4];
  #pragma unroll
  for (int n = 0; n < kDv / 8; ++n) h[n][0] = h[n][1] = h[n][2] = h[n][3] = 0.f;

  const int64_t q_last = (q0 + kBlockQ < T ? q0 + kBlockQ : T) - 1;
  const int64_t j_first = q0 - keys + 1 > 0 ? q0 - keys + 1 : 0;
  for (int64_t k0 = j_first / kBlockK * kBlockK; k0 <= q_last; k0 += kBlockK) {
    __syncthreads();  // every warp is done with the previous block
    StageUnitRows<kSplit>(k_tilde, k0, T, k_hi, k_lo);
    for (int e = threadIdx.x; e < kBlockK * (kDv / 4); e += kThreadsPerCta) {
      const int r = e / (kDv / 4), c = 4 * (e % (kDv / 4));
      float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
      if (k0 + r < T) x = *reinterpret_cast<const float4*>(v_bar + (k0 + r) * kDv + c);
      uint32_t* dst = reinterpret_cast<uint32_t*>(&v_s[r * kStrideV + c]);
      dst[0] = PackBf16(x.x, x.y);
      dst[1] = PackBf16(x.z, x.w);
    }
    __syncthreads();
    #pragma unroll 1
    for (int step = 0; step < kBlockK / 16; ++step) {
      const int64_t kj = k0 + 16 * step;
      // Warp-uniform: some pair (i, j), i in [qw, qw + 15] ∩ [0, T), j in [kj, kj + 15],
      // has 0 ≤ i − j < keys.
      if (qw >= T || kj > qw + 15 || kj + 15 < qw - keys + 1) continue;
      // s = q̃ k̃ᵀ for keys kj … kj + 15: n-tile 0 (keys + 0–7) and 1 (+ 8–15). Lane L
      // names row L % 8 of 8×8 matrix L / 8 = (key half, d_K half) of the 16×16 k̃ tile;
      // r[0], r[1] are n-tile 0's B fragment, r[2], r[3] n-tile 1's.
      const int key_row = 16 * step + 8 * (lane / 16) + lane % 8, col = 8 * ((lane / 8) % 2);
      uint32_t kb_hi[4], kb_lo[4] = {0, 0, 0, 0};
      LdmatrixX4(kb_hi, &k_hi[key_row * kStrideK + col]);
      if (kSplit) LdmatrixX4(kb_lo, &k_lo[key_row * kStrideK + col]);
      float sim[2][4];
      #pragma unroll
      for (int n = 0; n < 2; ++n) {
        const float zero[4] = {0.f, 0.f, 0.f, 0.f};
        if (kSplit) {  // small terms first: q_lo·k_hi + q_hi·k_lo + q_hi·k_hi
          MmaM16N8K16Bf16(sim[n], qa_lo, &kb_hi[2 * n], zero);
          MmaM16N8K16Bf16(sim[n], qa_hi, &kb_lo[2 * n], sim[n]);
          MmaM16N8K16Bf16(sim[n], qa_hi, &kb_hi[2 * n], sim[n]);
        } else {
          MmaM16N8K16Bf16(sim[n], qa_hi, &kb_hi[2 * n], zero);
        }
      }
      // Trim² · Softmask on the fragments (steps 8–9): as the simple kernel,
      // weight = a ≤ 0 ? 0 : a² m(i − j), and 0 outside the window (NaN stays NaN).
      bool any = false;
      #pragma unroll
      for (int n = 0; n < 2; ++n) {
        #pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t i = qw + g + 8 * (e / 2), j = kj + 8 * n + 2 * u + e % 2, d = i - j;
          const float a = 1.f - (1.f - sim[n][e]) / tp.r;
          const bool inside = i < T && d >= 0 && d < keys;
          sim[n][e] = !inside || a <= 0.f ? 0.f : a * a * m[d];
          any |= sim[n][e] != 0.f;
        }
      }
      if (!__any_sync(0xffffffffu, any)) continue;  // every pair rejected: no value work
      // h += (α m) v̄: A = the weights (16 queries × 16 keys) straight from the
      // accumulators; B = v̄ rows kj … kj + 15 by ldmatrix.trans, 16 columns at a time.
      const uint32_t wa[4] = {PackBf16(sim[0][0], sim[0][1]), PackBf16(sim[0][2], sim[0][3]),
                              PackBf16(sim[1][0], sim[1][1]), PackBf16(sim[1][2], sim[1][3])};
      #pragma unroll
      for (int c16 = 0; c16 < kDv / 16; ++c16) {
        uint32_t vb[4];
        LdmatrixX4Trans(vb, &v_s[(16 * step + lane % 16) * kStrideV + 16 * c16 + 8 * (lane / 16)]);
        MmaM16N8K16Bf16(h[2 * c16], wa, &vb[0], h[2 * c16]);
        MmaM16N8K16Bf16(h[2 * c16 + 1], wa, &vb[2], h[2 * c16 + 1]);
      }
    }
  }

  // Epilogue (steps 11–13) for rows qw + g (e = 0, 1) and qw + g + 8 (e = 2, 3).
  float sq[2] = {0.f, 0.f};
  #pragma unroll
  for (int n = 0; n < kDv / 8; ++n) {
    sq[0] += h[n][0] * h[n][0] + h[n][1] * h[n][1];
    sq[1] += h[n][2] * h[n][2] + h[n][3] * h[n][3];
  }
  #pragma unroll
  for (int half = 0; half < 2; ++half) {  // the row's four lanes 4g … 4g + 3
    sq[half] += __shfl_xor_sync(0xffffffffu, sq[half], 1);
    sq[half] += __shfl_xor_sync(0xffffffffu, sq[half], 2);
  }
  const int64_t C = s.p_cols();
  #pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t i = qw + g + 8 * half;
    if (i >= T) continue;
    float f = 1.f, unused;
    if (s.tanh_norm) TanhNormScale(sqrtf(sq[half]), &f, &unused);
    const float* gate_in = P + (b * T + i) * s.tiles * C + t * C + 2 * kDk + kDv;
    float* h_out = saved.h + (bt * T + i) * kDv;
    float* out = U + (b * T + i) * s.tiles * kDv + t * kDv;
    #pragma unroll
    for (int n = 0; n < kDv / 8; ++n) {
      #pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int c = 8 * n + 2 * u + e;
        const float hv = h[n][2 * half + e];
        float gate, gate_dg;
        GateForwardAndDerivative(gate_in[c], &gate, &gate_dg);
        h_out[c] = hv;
        out[c] = tp.scale * hv * f * gate;
      }
    }
  }
}

template <bool kSplit>
void Forward(const ScreeningShape& shape, const float* P, const TileScalars* tiles, const ScreeningSaved<float>& saved,
             float* U, ScreeningScratch* scratch, cudaStream_t stream) {
  if (shape.batch <= 0 || shape.seq <= 0 || shape.tiles <= 0) return;
  if (shape.d_k != kDk || shape.d_v != kDv) {
    ScreeningForward(shape, P, tiles, saved, U, scratch, stream);
    return;
  }
  // Steps 5–6 are the simple kernel's own pass (saved q̃, k̃, v̄ and norms bit for bit), which
  // also uploads the tile tables this pass reads.
  ScreeningNormalize(shape, P, tiles, saved, scratch, stream);
  const TiledDims s{shape.batch, shape.seq, shape.tiles, shape.pos0, scratch->mask_ld, shape.tanh_norm};
  const dim3 grid(static_cast<unsigned>((s.seq + kBlockQ - 1) / kBlockQ), static_cast<unsigned>(s.tiles),
                  static_cast<unsigned>(s.batch));
  Launch<TiledAggregateKernel<kSplit>>(grid, kThreadsPerCta, 0, stream, s, P, scratch->params.data(),
                                       scratch->mask.data(), saved, U);
  MS_CUDA_CHECK_LAUNCH("ScreeningTiledForward");
}

}  // namespace

void ScreeningTiledForward(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                           const ScreeningSaved<float>& saved, float* U, ScreeningScratch* scratch,
                           cudaStream_t stream) {
  Forward<true>(shape, P, tiles, saved, U, scratch, stream);
}

void ScreeningTiledForwardPlainBf16Similarity(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                                              const ScreeningSaved<float>& saved, float* U,
                                              ScreeningScratch* scratch, cudaStream_t stream) {
  Forward<false>(shape, P, tiles, saved, U, scratch, stream);
}

}  // namespace multiscreen::kernels::cuda
