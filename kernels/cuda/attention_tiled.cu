// Causal softmax attention tiled on tensor cores (attention_tiled.h): a flash-style
// forward, and a backward of a query pass (which also forms D_i) and a key pass between
// the simple kernel's uploads and its fixed-order ∂scale reduction
// (AttentionBackwardBegin/Finish); mma.sync m16n8k16 bf16 with fp32 accumulation, every
// operand of q·kᵀ, p·v and ∂o·vᵀ as bf16 hi + lo parts under kSplit.
#include "kernels/cuda/attention_tiled.h"

#include <cuda_bf16.h>
#include <math_constants.h>

#include <cstdint>
#include <initializer_list>

#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/tensor_core.cuh"

namespace multiscreen::kernels::cuda {
namespace {

constexpr int kDh = 64;                     // d_h: 4 k-steps of 16, 8 n-tiles of 8
constexpr int kWarps = 4;
constexpr int kThreadsPerCta = 32 * kWarps;
constexpr int kBlockQ = 16 * kWarps;        // queries per CTA (forward, query pass), 16 per warp
constexpr int kBlockK = 16 * kWarps;        // keys per CTA (key pass), 16 per warp; keys per staged block
static_assert(kBlockQ == kBlockK, "the causal walks start and end on the diagonal block");
static_assert(kThreadsPerCta == 2 * kBlockQ, "the query pass's D_i: two threads per row");
constexpr int kStride = kDh + 8;            // bf16 per shared row: 144 bytes, ldmatrix's 8 rows in distinct banks
constexpr int kTile = kBlockK * kStride;    // bf16 per staged 64-row tile
// Occupancy designed for: 3 CTAs (12 warps) per SM, ≤ 168 registers per thread; the key
// pass, which holds k and v (hi, lo) and ∂k, ∂v through its walk, spills 16 bytes at 168
// on sm_80 and gets 2 there (≤ 255 registers). With RoPE fused the key pass gets 2 on
// sm_90 too: at 168 registers it spilled 20 to 40 bytes in every arrangement tried (the
// staging of q̃ two or four pairs at a time, unrolled or not; k's lo fragments read from
// shared memory instead of held; the turn-back of ∂k before or with ∂v's writes), 204
// registers without the bound (ptxas, CUDA 13).
constexpr int kCtasPerSm = 3;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
constexpr int kKeyPassCtasPerSm = 2;
#else
constexpr int kKeyPassCtasPerSm = 3;
#endif
constexpr int kRopeKeyPassCtasPerSm = 2;
constexpr float kLog2e = 1.4426950408889634f;
constexpr double kLn2 = 0.6931471805599453;

// One (b, h) pair's view of the [B·T, heads·d_h] arrays: row i of the pair starts at
// base + i·ld.
struct HeadView {
  int64_t T, ld, base, bh;  // bh = b·heads + h: the pair's rows of lse, delta, parts
  int h;
};
__device__ inline HeadView ViewOf(int64_t T, int64_t heads) {
  HeadView v;
  v.T = T;
  v.ld = heads * kDh;
  v.h = static_cast<int>(blockIdx.y);
  v.bh = int64_t(blockIdx.z) * heads + v.h;
  v.base = int64_t(blockIdx.z) * T * v.ld + int64_t(v.h) * kDh;
  return v;
}

__device__ inline uint16_t Bf16Bits(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
__device__ inline float Bf16Value(uint16_t bits) { return __bfloat162float(__ushort_as_bfloat16(bits)); }
// Two floats as one bf16 pair register, `low` in the low 16 bits (the fragments' order).
__device__ inline uint32_t PackBf16(float low, float high) {
  return uint32_t(Bf16Bits(low)) | uint32_t(Bf16Bits(high)) << 16;
}
// The bf16 rounding remainder x − bf16(x) of two floats, packed as PackBf16.
__device__ inline uint32_t PackBf16Rest(float low, float high) {
  return PackBf16(low - Bf16Value(Bf16Bits(low)), high - Bf16Value(Bf16Bits(high)));
}

// Rows [row0, row0 + 64) of one head's columns (src: the pair's row 0; row stride ld)
// into shared bf16 `hi` at kStride, and into `lo` the rounding remainder when lo is
// given; rows at or past T are zeros. Every thread of the CTA calls it.
__device__ inline void StageRows(const float* src, int64_t ld, int64_t row0, int64_t T, uint16_t* hi,
                                 uint16_t* lo = nullptr) {
  for (int e = threadIdx.x; e < kBlockK * (kDh / 4); e += kThreadsPerCta) {
    const int r = e / (kDh / 4), c = 4 * (e % (kDh / 4));
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (row0 + r < T) x = *reinterpret_cast<const float4*>(src + (row0 + r) * ld + c);
    *reinterpret_cast<uint2*>(&hi[r * kStride + c]) = make_uint2(PackBf16(x.x, x.y), PackBf16(x.z, x.w));
    if (lo != nullptr) {
      *reinterpret_cast<uint2*>(&lo[r * kStride + c]) = make_uint2(PackBf16Rest(x.x, x.y), PackBf16Rest(x.z, x.w));
    }
  }
}

// StageRows for q or k with RoPE fused: row t's pairs (p, p + d_h/2) turned by φ(t, p)
// on their way to shared memory, (a, b) ← (a cos φ − b sin φ, a sin φ + b cos φ) in fp32
// (cuda::Rope's arithmetic), then split as StageRows. rope: RopeTable's [T, d_h] (cos,
// sin) of the call's positions (kernels/cuda/rope.h); !kRope: StageRows itself. An
// element is two pairs of one row (a float2 of x at p and at p + 32, a float4 of the
// table), one at a time (not unrolled).
template <bool kRope>
__device__ inline void StageTurnedRows(const float* src, int64_t ld, int64_t row0, int64_t T, const float* rope,
                                       uint16_t* hi, uint16_t* lo = nullptr) {
  if (!kRope) {
    StageRows(src, ld, row0, T, hi, lo);
    return;
  }
  constexpr int kHalf = kDh / 2;
  #pragma unroll 1
  for (int e = threadIdx.x; e < kBlockK * (kHalf / 2); e += kThreadsPerCta) {
    const int r = e / (kHalf / 2), c = 2 * (e % (kHalf / 2));
    float2 a = make_float2(0.f, 0.f), b = a;  // columns c, c + 1 and c + 32, c + 33
    if (row0 + r < T) {
      const float* x = src + (row0 + r) * ld;
      const float2 x0 = *reinterpret_cast<const float2*>(x + c), x1 = *reinterpret_cast<const float2*>(x + c + kHalf);
      const float4 cs = *reinterpret_cast<const float4*>(rope + (row0 + r) * kDh + 2 * c);  // pairs c, c + 1
      a = make_float2(x0.x * cs.x - x1.x * cs.y, x0.y * cs.z - x1.y * cs.w);
      b = make_float2(x0.x * cs.y + x1.x * cs.x, x0.y * cs.w + x1.y * cs.z);
    }
    *reinterpret_cast<uint32_t*>(&hi[r * kStride + c]) = PackBf16(a.x, a.y);
    *reinterpret_cast<uint32_t*>(&hi[r * kStride + c + kHalf]) = PackBf16(b.x, b.y);
    if (lo != nullptr) {
      *reinterpret_cast<uint32_t*>(&lo[r * kStride + c]) = PackBf16Rest(a.x, a.y);
      *reinterpret_cast<uint32_t*>(&lo[r * kStride + c + kHalf]) = PackBf16Rest(b.x, b.y);
    }
  }
}

// Writes one row of ∂L/∂q or ∂L/∂k from the accumulators of the warp's lane (element pair
// `half` of each n-tile: columns 8n + 2t, 8n + 2t + 1), times sc; with RoPE fused
// (kRope; rope_row: RopeTable's row of the token) turned back by the rotation's
// transpose, the gradient of the unturned row: (∂a, ∂b) ← (∂ã cos φ + ∂b̃ sin φ,
// −∂ã sin φ + ∂b̃ cos φ) for the pair (p, p + d_h/2), which sit in n-tiles n and n + 4
// of the same lane.
template <bool kRope>
__device__ inline void StoreGradientRow(const float acc[kDh / 8][4], int half, float sc, const float* rope_row,
                                        float* out) {
  const int t = threadIdx.x % 4;
  float x[kDh / 8][2];
  #pragma unroll
  for (int n = 0; n < kDh / 8; ++n) {
    x[n][0] = sc * acc[n][2 * half];
    x[n][1] = sc * acc[n][2 * half + 1];
  }
  if (kRope) {
    #pragma unroll
    for (int n = 0; n < kDh / 16; ++n) {
      const float4 cs = *reinterpret_cast<const float4*>(rope_row + 2 * (8 * n + 2 * t));  // pairs 8n + 2t, + 1
      const float c[2] = {cs.x, cs.z}, sn[2] = {cs.y, cs.w};
      #pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float a = x[n][e], b = x[n + kDh / 16][e];
        x[n][e] = a * c[e] + b * sn[e];
        x[n + kDh / 16][e] = b * c[e] - a * sn[e];
      }
    }
  }
  #pragma unroll
  for (int n = 0; n < kDh / 8; ++n) *reinterpret_cast<float2*>(out + 8 * n + 2 * t) = make_float2(x[n][0], x[n][1]);
}

// The A fragments (16 rows × d_h, k-steps kk = 0..3) of rows [row, row + 16) of a
// staged tile.
__device__ inline void LoadRowsAsA(const uint16_t* tile, int row, uint32_t a[kDh / 16][4]) {
  const int lane = threadIdx.x % 32;
  #pragma unroll
  for (int kk = 0; kk < kDh / 16; ++kk) {
    LdmatrixX4(a[kk], &tile[(row + lane % 16) * kStride + 16 * kk + 8 * (lane / 16)]);
  }
}

// The B fragments of k-step kk for X·Yᵀ where Y's rows [row, row + 16) are staged
// ([n][k] as stored): r[0], r[1] n-tile rows row … row + 7, r[2], r[3] rows + 8 … + 15.
__device__ inline void LoadRowsAsB(const uint16_t* tile, int row, int kk, uint32_t r[4]) {
  const int lane = threadIdx.x % 32;
  LdmatrixX4(r, &tile[(row + 8 * (lane / 16) + lane % 8) * kStride + 16 * kk + 8 * ((lane / 8) % 2)]);
}

// The B fragments of columns [16·c16, 16·c16 + 16) for X·Y where Y's rows [row, row + 16)
// are staged ([k][n]): r[0], r[1] n-tile columns + 0 … 7, r[2], r[3] + 8 … 15.
__device__ inline void LoadColumnsAsB(const uint16_t* tile, int row, int c16, uint32_t r[4]) {
  const int lane = threadIdx.x % 32;
  LdmatrixX4Trans(r, &tile[(row + lane % 16) * kStride + 16 * c16 + 8 * (lane / 16)]);
}

// acc[0..1] (two n-tiles) += A·B for one k-step: with kSplit the three products of the
// hi/lo parts, small terms first (a_lo·b_lo, ~2^-16 relative, dropped).
template <bool kSplit>
__device__ inline void MmaPair(float acc[2][4], const uint32_t a_hi[4], const uint32_t a_lo[4], const uint32_t b_hi[4],
                               const uint32_t b_lo[4]) {
  #pragma unroll
  for (int n = 0; n < 2; ++n) {
    if (kSplit) {
      MmaM16N8K16Bf16(acc[n], a_lo, &b_hi[2 * n], acc[n]);
      MmaM16N8K16Bf16(acc[n], a_hi, &b_lo[2 * n], acc[n]);
    }
    MmaM16N8K16Bf16(acc[n], a_hi, &b_hi[2 * n], acc[n]);
  }
}

// A 16×16 block held as two n-tiles of accumulators (x0: columns 0–7, x1: 8–15) as the
// bf16 A fragment of the next product, and when lo is given the rounding remainder's.
__device__ inline void AccumulatorsAsA(const float x0[4], const float x1[4], uint32_t a[4], uint32_t* lo = nullptr) {
  a[0] = PackBf16(x0[0], x0[1]);
  a[1] = PackBf16(x0[2], x0[3]);
  a[2] = PackBf16(x1[0], x1[1]);
  a[3] = PackBf16(x1[2], x1[3]);
  if (lo != nullptr) {
    lo[0] = PackBf16Rest(x0[0], x0[1]);
    lo[1] = PackBf16Rest(x0[2], x0[3]);
    lo[2] = PackBf16Rest(x1[0], x1[1]);
    lo[3] = PackBf16Rest(x1[2], x1[3]);
  }
}

// acc[2·c16], acc[2·c16 + 1] += A·Y over the d_h columns, Y's 16 rows staged at `row`
// of `tile`; with kSplit, A = a + a_lo and Y = tile + tile_lo (three products, MmaPair's).
template <bool kSplit>
__device__ inline void MmaIntoColumns(float acc[kDh / 8][4], const uint32_t a[4], const uint32_t a_lo[4],
                                      const uint16_t* tile, const uint16_t* tile_lo, int row) {
  #pragma unroll
  for (int c16 = 0; c16 < kDh / 16; ++c16) {
    uint32_t b[4], b_lo[4];
    LoadColumnsAsB(tile, row, c16, b);
    if (kSplit) LoadColumnsAsB(tile_lo, row, c16, b_lo);
    MmaPair<kSplit>(&acc[2 * c16], a, a_lo, b, b_lo);
  }
}

// ---- Forward ------------------------------------------------------------------------

// One CTA: queries [q0, q0 + 64) of the pair (b = blockIdx.z, h = blockIdx.y); warp w
// owns queries qw = q0 + 16w …; lane 4g + t holds rows qw + g (accumulator elements 0,
// 1) and qw + g + 8 (2, 3), columns 2t, 2t + 1 of each n-tile. Walks key blocks
// k0 = 0, 64, …, q0 (the diagonal block last): per block s = q·kᵀ for the warp's 16
// queries and the block's 64 keys (8 n-tiles; 16-key groups past the warp's last query
// skipped), scaled to base 2 (c = scale·log2 e), masked (j > i) on the diagonal block,
// the running max m and sum l (per lane, over its columns) updated, o rescaled, and
// o += p·v on tensor cores. kSplit: every operand as bf16 hi + lo (attention_tiled.h).
// kRope: q and k turned as staged by the table `rope` (StageTurnedRows). A template
// argument, not a null test: with both staging loops in one kernel the key pass spilled
// 4 bytes at sm_90's 168 registers (ptxas), with one it does not.
template <bool kSplit, bool kRope>
__global__ void __launch_bounds__(kThreadsPerCta, kCtasPerSm)
    AttentionTiledForwardKernel(int64_t T, int64_t heads, const float* q, const float* k, const float* v,
                                const float* rope, const double* scale, float* o, double* lse) {
  __shared__ __align__(16) uint16_t k_hi[kTile];
  __shared__ __align__(16) uint16_t k_lo[kSplit ? kTile : 8];
  __shared__ __align__(16) uint16_t v_hi[kTile];
  __shared__ __align__(16) uint16_t v_lo[kSplit ? kTile : 8];

  const HeadView hv = ViewOf(T, heads);
  const int64_t q0 = int64_t(blockIdx.x) * kBlockQ;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t qw = q0 + 16 * warp;
  const float c = static_cast<float>(scale[hv.h]) * kLog2e;

  // The warp's q (16 rows × d_h) as A fragments, held for the walk; staged through k's
  // buffers.
  StageTurnedRows<kRope>(q + hv.base, hv.ld, q0, T, rope, k_hi, kSplit ? k_lo : nullptr);
  __syncthreads();
  uint32_t qa_hi[kDh / 16][4], qa_lo[kDh / 16][4];
  LoadRowsAsA(k_hi, 16 * warp, qa_hi);
  if (kSplit) LoadRowsAsA(k_lo, 16 * warp, qa_lo);

  float acc[kDh / 8][4];
  #pragma unroll
  for (int n = 0; n < kDh / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  float m[2] = {-CUDART_INF_F, -CUDART_INF_F}, l[2] = {0.f, 0.f};  // rows qw + g, qw + g + 8 (base 2)

  for (int64_t k0 = 0; k0 <= q0; k0 += kBlockK) {
    __syncthreads();  // every warp is done with the previous block (and with q)
    StageTurnedRows<kRope>(k + hv.base, hv.ld, k0, T, rope, k_hi, kSplit ? k_lo : nullptr);
    StageRows(v + hv.base, hv.ld, k0, T, v_hi, kSplit ? v_lo : nullptr);
    __syncthreads();
    if (qw >= T) continue;  // warp-uniform: no query of this warp exists
    const bool diagonal = k0 == q0;
    // Key groups kg (keys k0 + 16kg …) that some query of the warp sees: all but, on the
    // diagonal block, those past the warp's queries (kg > warp).
    const int groups = diagonal ? warp + 1 : kBlockK / 16;
    float s[kDh / 8][4];
    #pragma unroll
    for (int kg = 0; kg < kBlockK / 16; ++kg) {
      s[2 * kg][0] = s[2 * kg][1] = s[2 * kg][2] = s[2 * kg][3] = 0.f;
      s[2 * kg + 1][0] = s[2 * kg + 1][1] = s[2 * kg + 1][2] = s[2 * kg + 1][3] = 0.f;
      if (kg >= groups) continue;
      #pragma unroll
      for (int kk = 0; kk < kDh / 16; ++kk) {
        uint32_t kb_hi[4], kb_lo[4];
        LoadRowsAsB(k_hi, 16 * kg, kk, kb_hi);
        if (kSplit) LoadRowsAsB(k_lo, 16 * kg, kk, kb_lo);
        MmaPair<kSplit>(&s[2 * kg], qa_hi[kk], qa_lo[kk], kb_hi, kb_lo);
      }
    }
    // Scale to base 2, mask, and the rows' block maxima (over the row's four lanes).
    float block_max[2] = {-CUDART_INF_F, -CUDART_INF_F};
    #pragma unroll
    for (int n = 0; n < kDh / 8; ++n) {
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t i = qw + g + 8 * (e / 2), j = k0 + 8 * n + 2 * t + e % 2;
        s[n][e] = diagonal && j > i ? -CUDART_INF_F : s[n][e] * c;
        block_max[e / 2] = fmaxf(block_max[e / 2], s[n][e]);
      }
    }
    float rescale[2];
    #pragma unroll
    for (int half = 0; half < 2; ++half) {
      block_max[half] = fmaxf(block_max[half], __shfl_xor_sync(0xffffffffu, block_max[half], 1));
      block_max[half] = fmaxf(block_max[half], __shfl_xor_sync(0xffffffffu, block_max[half], 2));
      const float m_new = fmaxf(m[half], block_max[half]);
      // Key 0 is in every row's first block, so m_new is finite; −∞ guarded all the same.
      const float m_use = m_new == -CUDART_INF_F ? 0.f : m_new;
      rescale[half] = exp2f(m[half] - m_use);
      m[half] = m_new;
      l[half] *= rescale[half];
      #pragma unroll
      for (int n = 0; n < kDh / 8; ++n) {
        s[n][2 * half] = exp2f(s[n][2 * half] - m_use);
        s[n][2 * half + 1] = exp2f(s[n][2 * half + 1] - m_use);
        l[half] += s[n][2 * half] + s[n][2 * half + 1];
      }
    }
    #pragma unroll
    for (int n = 0; n < kDh / 8; ++n) {
      acc[n][0] *= rescale[0];
      acc[n][1] *= rescale[0];
      acc[n][2] *= rescale[1];
      acc[n][3] *= rescale[1];
    }
    // o += p·v: A = p (16 queries × 16 keys of group kg) from the accumulators; B = v rows.
    #pragma unroll
    for (int kg = 0; kg < kBlockK / 16; ++kg) {
      if (kg >= groups) continue;
      uint32_t pa_hi[4], pa_lo[4];
      AccumulatorsAsA(s[2 * kg], s[2 * kg + 1], pa_hi, kSplit ? pa_lo : nullptr);
      MmaIntoColumns<kSplit>(acc, pa_hi, pa_lo, v_hi, v_lo, 16 * kg);
    }
  }

  if (qw >= T) return;
  #pragma unroll
  for (int half = 0; half < 2; ++half) {  // the row's four lanes, in a fixed order
    l[half] += __shfl_xor_sync(0xffffffffu, l[half], 1);
    l[half] += __shfl_xor_sync(0xffffffffu, l[half], 2);
  }
  #pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t i = qw + g + 8 * half;
    if (i >= T) continue;
    const float inv = 1.f / l[half];
    float* out = o + hv.base + i * hv.ld;
    #pragma unroll
    for (int n = 0; n < kDh / 8; ++n) {
      *reinterpret_cast<float2*>(out + 8 * n + 2 * t) =
          make_float2(acc[n][2 * half] * inv, acc[n][2 * half + 1] * inv);
    }
    if (t == 0) lse[hv.bh * T + i] = (double(m[half]) + log2(double(l[half]))) * kLn2;
  }
}

// ---- Backward -------------------------------------------------------------------------

// Query pass: a CTA per (64-query block, h, b) as the forward's, warp w owning queries
// qw = q0 + 16w …, q and ∂L/∂o held as A fragments, walking the forward's key blocks. First
// D_i = ∂L/∂o_i · o_i of the block's rows (fp64; into delta for the key pass). Per 16-key
// step with a key at or before the warp's last query: s = q·kᵀ (as the forward's),
// p = 2^(c·s − lse_i·log2 e) (0 for j > i), dp = ∂L/∂o_i·v_j, ds = p (dp − D_i) (= ∂L/∂z),
// ∂L/∂q_i += ds·k_j (tensor cores, ds and k rounded to bf16) and the row's
// Σ_j ds·(q_i·k_j) (fp32 per step, fp64 across steps). Writes ∂L/∂q = scale·Σ ds k and
// parts_i. kRope: q and k turned as staged by `rope`, and ∂L/∂q turned back (StoreGradientRow).
template <bool kSplit, bool kRope>
__global__ void __launch_bounds__(kThreadsPerCta, kCtasPerSm)
    AttentionTiledQueryBackwardKernel(int64_t T, int64_t heads, const float* q, const float* k, const float* v,
                                      const float* rope, const float* o, const float* d_o, const double* scale,
                                      const double* lse, double* delta, float* dq, double* parts) {
  __shared__ __align__(16) uint16_t k_hi[kTile];
  __shared__ __align__(16) uint16_t k_lo[kSplit ? kTile : 8];
  __shared__ __align__(16) uint16_t v_hi[kTile];
  __shared__ __align__(16) uint16_t v_lo[kSplit ? kTile : 8];
  __shared__ float d_rows[kBlockQ];

  const HeadView hv = ViewOf(T, heads);
  const int64_t q0 = int64_t(blockIdx.x) * kBlockQ;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t qw = q0 + 16 * warp;
  const double scale_h = scale[hv.h];
  const float c = static_cast<float>(scale_h) * kLog2e;

  // q through k's buffers and ∂L/∂o through v's, as A fragments.
  StageTurnedRows<kRope>(q + hv.base, hv.ld, q0, T, rope, k_hi, kSplit ? k_lo : nullptr);
  StageRows(d_o + hv.base, hv.ld, q0, T, v_hi, kSplit ? v_lo : nullptr);
  // D_i = ∂L/∂o_i · o_i of the block's rows, two threads per row (32 columns each, fp64,
  // then the pair's sum), into delta (the key pass's) and d_rows (this pass's).
  {
    const int r = threadIdx.x / 2, part = threadIdx.x % 2;
    const int64_t i = q0 + r;
    double sum = 0;
    if (i < T) {
      const float* do_row = d_o + hv.base + i * hv.ld + 32 * part;
      const float* o_row = o + hv.base + i * hv.ld + 32 * part;
      for (int x = 0; x < 32; ++x) sum += double(do_row[x]) * double(o_row[x]);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    if (part == 0) {
      d_rows[r] = static_cast<float>(sum);
      if (i < T) delta[hv.bh * T + i] = sum;
    }
  }
  __syncthreads();
  uint32_t qa_hi[kDh / 16][4], qa_lo[kDh / 16][4], da_hi[kDh / 16][4], da_lo[kDh / 16][4];
  LoadRowsAsA(k_hi, 16 * warp, qa_hi);
  LoadRowsAsA(v_hi, 16 * warp, da_hi);
  if (kSplit) {
    LoadRowsAsA(k_lo, 16 * warp, qa_lo);
    LoadRowsAsA(v_lo, 16 * warp, da_lo);
  }
  // The rows' lse in base 2 (+∞ past T: p = 0) and D_i.
  float lse2[2], d_i[2];
  #pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t i = qw + g + 8 * half;
    lse2[half] = i < T ? static_cast<float>(lse[hv.bh * T + i] * double(kLog2e)) : CUDART_INF_F;
    d_i[half] = d_rows[16 * warp + g + 8 * half];
  }
  float acc[kDh / 8][4];
  #pragma unroll
  for (int n = 0; n < kDh / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  double part[2] = {0, 0};

  for (int64_t k0 = 0; k0 <= q0; k0 += kBlockK) {
    __syncthreads();  // every warp is done with the previous block (and with q, ∂L/∂o)
    StageTurnedRows<kRope>(k + hv.base, hv.ld, k0, T, rope, k_hi, kSplit ? k_lo : nullptr);
    StageRows(v + hv.base, hv.ld, k0, T, v_hi, kSplit ? v_lo : nullptr);
    __syncthreads();
    if (qw >= T) continue;
    #pragma unroll 1
    for (int step = 0; step < kBlockK / 16; ++step) {
      const int64_t kj = k0 + 16 * step;
      if (kj > qw + 15) break;  // warp-uniform: these keys and the rest follow every query
      float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
      float dp[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
      #pragma unroll
      for (int kk = 0; kk < kDh / 16; ++kk) {
        uint32_t b_hi[4], b_lo[4];
        LoadRowsAsB(k_hi, 16 * step, kk, b_hi);
        if (kSplit) LoadRowsAsB(k_lo, 16 * step, kk, b_lo);
        MmaPair<kSplit>(s, qa_hi[kk], qa_lo[kk], b_hi, b_lo);
        LoadRowsAsB(v_hi, 16 * step, kk, b_hi);
        if (kSplit) LoadRowsAsB(v_lo, 16 * step, kk, b_lo);
        MmaPair<kSplit>(dp, da_hi[kk], da_lo[kk], b_hi, b_lo);
      }
      float part_step[2] = {0.f, 0.f};
      #pragma unroll
      for (int n = 0; n < 2; ++n) {
        #pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t i = qw + g + 8 * (e / 2), j = kj + 8 * n + 2 * t + e % 2;
          const float p = j > i ? 0.f : exp2f(s[n][e] * c - lse2[e / 2]);
          const float ds = p * (dp[n][e] - d_i[e / 2]);
          part_step[e / 2] += ds * s[n][e];
          dp[n][e] = ds;
        }
      }
      part[0] += part_step[0];
      part[1] += part_step[1];
      uint32_t dsa[4];
      AccumulatorsAsA(dp[0], dp[1], dsa);
      MmaIntoColumns<false>(acc, dsa, dsa, k_hi, k_hi, 16 * step);
    }
  }

  if (qw >= T) return;
  #pragma unroll
  for (int half = 0; half < 2; ++half) {  // the row's four lanes, in a fixed order
    part[half] += __shfl_xor_sync(0xffffffffu, part[half], 1);
    part[half] += __shfl_xor_sync(0xffffffffu, part[half], 2);
  }
  const float sc = static_cast<float>(scale_h);
  #pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t i = qw + g + 8 * half;
    if (i >= T) continue;
    StoreGradientRow<kRope>(acc, half, sc, rope + i * kDh, dq + hv.base + i * hv.ld);
    if (t == 0) parts[hv.bh * T + i] = part[half];
  }
}

// Key pass: a CTA per (64-key block, h, b), warp w owning keys kw = k0 + 16w …, k and v
// held as A fragments, walking the query blocks q0 = k0, k0 + 64, … < T (the diagonal
// block first). Per 16-query step with a query at or after the warp's first key:
// sᵀ = k·qᵀ, pᵀ (0 for j > i), dpᵀ = v_j·∂L/∂o_i, dsᵀ = pᵀ (dpᵀ − D_i) recomputed (the
// block's lse and D staged), then ∂L/∂v_j += Σ_i p_ij ∂L/∂o_i and ∂L/∂k_j += Σ_i ds_ij q_i
// on tensor cores (pᵀ, dsᵀ, ∂L/∂o and q rounded to bf16). Writes ∂L/∂k = scale·Σ ds q and
// ∂L/∂v. kRope: q and k turned as staged by `rope`, and ∂L/∂k turned back.
template <bool kSplit, bool kRope>
__global__ void __launch_bounds__(kThreadsPerCta, kRope ? kRopeKeyPassCtasPerSm : kKeyPassCtasPerSm)
    AttentionTiledKeyBackwardKernel(int64_t T, int64_t heads, const float* q, const float* k, const float* v,
                                    const float* rope, const float* d_o, const double* scale, const double* lse,
                                    const double* delta, float* dk, float* dv) {
  __shared__ __align__(16) uint16_t q_hi[kTile];
  __shared__ __align__(16) uint16_t q_lo[kSplit ? kTile : 8];
  __shared__ __align__(16) uint16_t do_hi[kTile];
  __shared__ __align__(16) uint16_t do_lo[kSplit ? kTile : 8];
  __shared__ float lse2_s[kBlockQ], d_s[kBlockQ];

  const HeadView hv = ViewOf(T, heads);
  const int64_t k0 = int64_t(blockIdx.x) * kBlockK;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t kw = k0 + 16 * warp;
  const double scale_h = scale[hv.h];
  const float c = static_cast<float>(scale_h) * kLog2e;

  // k through q's buffers and v through ∂L/∂o's, as A fragments.
  StageTurnedRows<kRope>(k + hv.base, hv.ld, k0, T, rope, q_hi, kSplit ? q_lo : nullptr);
  StageRows(v + hv.base, hv.ld, k0, T, do_hi, kSplit ? do_lo : nullptr);
  __syncthreads();
  uint32_t ka_hi[kDh / 16][4], ka_lo[kDh / 16][4], va_hi[kDh / 16][4], va_lo[kDh / 16][4];
  LoadRowsAsA(q_hi, 16 * warp, ka_hi);
  LoadRowsAsA(do_hi, 16 * warp, va_hi);
  if (kSplit) {
    LoadRowsAsA(q_lo, 16 * warp, ka_lo);
    LoadRowsAsA(do_lo, 16 * warp, va_lo);
  }
  float acc_k[kDh / 8][4], acc_v[kDh / 8][4];
  #pragma unroll
  for (int n = 0; n < kDh / 8; ++n) {
    acc_k[n][0] = acc_k[n][1] = acc_k[n][2] = acc_k[n][3] = 0.f;
    acc_v[n][0] = acc_v[n][1] = acc_v[n][2] = acc_v[n][3] = 0.f;
  }

  for (int64_t q0 = k0; q0 < T; q0 += kBlockQ) {
    __syncthreads();  // every warp is done with the previous block (and with k, v)
    StageTurnedRows<kRope>(q + hv.base, hv.ld, q0, T, rope, q_hi, kSplit ? q_lo : nullptr);
    StageRows(d_o + hv.base, hv.ld, q0, T, do_hi, kSplit ? do_lo : nullptr);
    for (int r = threadIdx.x; r < kBlockQ; r += kThreadsPerCta) {  // +∞ past T: p = 0
      const int64_t i = q0 + r;
      lse2_s[r] = i < T ? static_cast<float>(lse[hv.bh * T + i] * double(kLog2e)) : CUDART_INF_F;
      d_s[r] = i < T ? static_cast<float>(delta[hv.bh * T + i]) : 0.f;
    }
    __syncthreads();
    if (kw >= T) continue;
    #pragma unroll 1
    for (int step = 0; step < kBlockQ / 16; ++step) {
      const int64_t qi = q0 + 16 * step;
      if (qi + 15 < kw) continue;  // warp-uniform: every query precedes every key of the warp
      float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
      float dp[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
      #pragma unroll
      for (int kk = 0; kk < kDh / 16; ++kk) {
        uint32_t b_hi[4], b_lo[4];
        LoadRowsAsB(q_hi, 16 * step, kk, b_hi);
        if (kSplit) LoadRowsAsB(q_lo, 16 * step, kk, b_lo);
        MmaPair<kSplit>(s, ka_hi[kk], ka_lo[kk], b_hi, b_lo);
      }
      #pragma unroll
      for (int kk = 0; kk < kDh / 16; ++kk) {
        uint32_t b_hi[4], b_lo[4];
        LoadRowsAsB(do_hi, 16 * step, kk, b_hi);
        if (kSplit) LoadRowsAsB(do_lo, 16 * step, kk, b_lo);
        MmaPair<kSplit>(dp, va_hi[kk], va_lo[kk], b_hi, b_lo);
      }
      #pragma unroll
      for (int n = 0; n < 2; ++n) {
        #pragma unroll
        for (int e = 0; e < 4; ++e) {  // row: key j; column: query i
          const int col = 16 * step + 8 * n + 2 * t + e % 2;
          const int64_t j = kw + g + 8 * (e / 2), i = q0 + col;
          const float p = j > i ? 0.f : exp2f(s[n][e] * c - lse2_s[col]);
          dp[n][e] = p * (dp[n][e] - d_s[col]);
          s[n][e] = p;
        }
      }
      uint32_t pa[4], dsa[4];
      AccumulatorsAsA(s[0], s[1], pa);
      MmaIntoColumns<false>(acc_v, pa, pa, do_hi, do_hi, 16 * step);
      AccumulatorsAsA(dp[0], dp[1], dsa);
      MmaIntoColumns<false>(acc_k, dsa, dsa, q_hi, q_hi, 16 * step);
    }
  }

  if (kw >= T) return;
  const float sc = static_cast<float>(scale_h);
  #pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t j = kw + g + 8 * half;
    if (j >= T) continue;
    float* out_k = dk + hv.base + j * hv.ld;
    float* out_v = dv + hv.base + j * hv.ld;
    if constexpr (kRope) {  // (if constexpr: the loop below is not there to be unreachable, nvcc's #128-D)
      StoreGradientRow<true>(acc_k, half, sc, rope + j * kDh, out_k);
      StoreGradientRow<false>(acc_v, half, 1.f, nullptr, out_v);
    } else {
      // (Without RoPE, ∂k and ∂v written in one loop: as two, the sm_90 instance spilled 24
      // bytes at its 168 registers.)
      #pragma unroll
      for (int n = 0; n < kDh / 8; ++n) {
        *reinterpret_cast<float2*>(out_k + 8 * n + 2 * t) =
            make_float2(sc * acc_k[n][2 * half], sc * acc_k[n][2 * half + 1]);
        *reinterpret_cast<float2*>(out_v + 8 * n + 2 * t) = make_float2(acc_v[n][2 * half], acc_v[n][2 * half + 1]);
      }
    }
  }
}

dim3 GridOf(const cpu::AttentionShape& shape) {
  return dim3(static_cast<unsigned>((shape.seq + kBlockQ - 1) / kBlockQ), static_cast<unsigned>(shape.heads),
              static_cast<unsigned>(shape.batch));
}

// A RoPE table given for a call the tiled kernels do not take is the caller's error: the
// simple kernel cannot turn q and k.
void CheckRope(const char* op, const float* rope, bool tiles) {
  if (rope != nullptr && !tiles) {
    FatalCudaError(op, "a RoPE table for a call the tiled kernels do not take (AttentionTiledTakes)");
  }
}

template <bool kSplit, bool kRope>
void Forward(const cpu::AttentionShape& shape, const float* q, const float* k, const float* v, const double* scale,
             float* o, double* lse, AttentionScratch* scratch, cudaStream_t stream, const float* rope) {
  const int64_t rows = shape.batch * shape.heads * shape.seq;
  const bool tiles = AttentionTiledTakes(shape, {q, k, v, o, rope});
  CheckRope("AttentionTiledForward", rope, tiles);
  if (rows <= 0 || !tiles) {
    AttentionForward(shape, q, k, v, scale, o, lse, scratch, stream);
    return;
  }
  scratch->scale.Resize(shape.heads);
  MS_CUDA_CHECK("AttentionTiledForward", cudaMemcpyAsync(scratch->scale.data(), scale, shape.heads * sizeof(double),
                                                         cudaMemcpyHostToDevice, stream));
  scratch->lse.Resize(rows);
  Launch<AttentionTiledForwardKernel<kSplit, kRope>>(GridOf(shape), kThreadsPerCta, 0, stream, shape.seq, shape.heads,
                                                     q, k, v, rope, scratch->scale.data(), o, scratch->lse.data());
  MS_CUDA_CHECK_LAUNCH("AttentionTiledForward");
  MS_CUDA_CHECK("AttentionTiledForward", cudaMemcpyAsync(lse, scratch->lse.data(), rows * sizeof(double),
                                                         cudaMemcpyDeviceToHost, stream));
  MS_CUDA_CHECK("AttentionTiledForward", cudaStreamSynchronize(stream));
}

template <bool kSplit, bool kRope>
void Backward(const cpu::AttentionShape& shape, const float* q, const float* k, const float* v, const float* o,
              const double* lse, const float* d_o, const double* scale, float* dq, float* dk, float* dv,
              double* d_scale, AttentionScratch* scratch, cudaStream_t stream, const float* rope) {
  const bool tiles = AttentionTiledTakes(shape, {q, k, v, d_o, dq, dk, dv, rope});
  CheckRope("AttentionTiledBackward", rope, tiles);
  if (!tiles) {
    AttentionBackward(shape, q, k, v, o, lse, d_o, scale, dq, dk, dv, d_scale, scratch, stream);
    return;
  }
  // The simple kernel's uploads (scale, lse); D_i is the query pass's.
  if (!AttentionBackwardBegin(shape, lse, scale, d_scale, scratch, stream)) return;
  Launch<AttentionTiledQueryBackwardKernel<kSplit, kRope>>(GridOf(shape), kThreadsPerCta, 0, stream, shape.seq,
                                                           shape.heads, q, k, v, rope, o, d_o, scratch->scale.data(),
                                                           scratch->lse.data(), scratch->delta.data(), dq,
                                                           scratch->parts.data());
  MS_CUDA_CHECK_LAUNCH("AttentionTiledBackward");
  Launch<AttentionTiledKeyBackwardKernel<kSplit, kRope>>(GridOf(shape), kThreadsPerCta, 0, stream, shape.seq,
                                                         shape.heads, q, k, v, rope, d_o, scratch->scale.data(),
                                                         scratch->lse.data(), scratch->delta.data(), dk, dv);
  MS_CUDA_CHECK_LAUNCH("AttentionTiledBackward");
  // The simple kernel's fixed-order Σ of the per-query parts into d_scale.
  AttentionBackwardFinish(shape, d_scale, scratch, stream);
}

}  // namespace

bool AttentionTiledTakes(const cpu::AttentionShape& shape, std::initializer_list<const float*> arrays) {
  if (shape.kind != AttentionKind::kSoftmax || shape.d_h != kDh || shape.batch > 65535 || shape.heads > 65535) {
    return false;
  }
  for (const float* a : arrays) {
    if (reinterpret_cast<uintptr_t>(a) % 16 != 0) return false;
  }
  return true;
}

void AttentionTiledForward(const cpu::AttentionShape& shape, const float* q, const float* k, const float* v,
                           const double* scale, float* o, double* lse, AttentionScratch* scratch, cudaStream_t stream,
                           AttentionOperands operands, const float* rope) {
  const bool split = operands == AttentionOperands::kSplit;
  if (split && rope != nullptr) {
    Forward<true, true>(shape, q, k, v, scale, o, lse, scratch, stream, rope);
  } else if (split) {
    Forward<true, false>(shape, q, k, v, scale, o, lse, scratch, stream, rope);
  } else if (rope != nullptr) {
    Forward<false, true>(shape, q, k, v, scale, o, lse, scratch, stream, rope);
  } else {
    Forward<false, false>(shape, q, k, v, scale, o, lse, scratch, stream, rope);
  }
}

void AttentionTiledBackward(const cpu::AttentionShape& shape, const float* q, const float* k, const float* v,
                            const float* o, const double* lse, const float* d_o, const double* scale, float* dq,
                            float* dk, float* dv, double* d_scale, AttentionScratch* scratch, cudaStream_t stream,
                            AttentionOperands operands, const float* rope) {
  const bool split = operands == AttentionOperands::kSplit;
  if (split && rope != nullptr) {
    Backward<true, true>(shape, q, k, v, o, lse, d_o, scale, dq, dk, dv, d_scale, scratch, stream, rope);
  } else if (split) {
    Backward<true, false>(shape, q, k, v, o, lse, d_o, scale, dq, dk, dv, d_scale, scratch, stream, rope);
  } else if (rope != nullptr) {
    Backward<false, true>(shape, q, k, v, o, lse, d_o, scale, dq, dk, dv, d_scale, scratch, stream, rope);
  } else {
    Backward<false, false>(shape, q, k, v, o, lse, d_o, scale, dq, dk, dv, d_scale, scratch, stream, rope);
  }
}

}  // namespace multiscreen::kernels::cuda
