// Screening forward and backward tiled on tensor cores (screening_tiled.h): a flash-style
// aggregate pass normalizing the P rows it loads (screening_rows.cuh's row arithmetic, as
// the simple kernel's NormalizeKernel); the simple
// kernel's reduction pass (ScreeningBackwardReduce) after a flash-style query pass, whose
// prologue runs the output pass (screening_rows.cuh's row arithmetic, as OutputBackwardKernel),
// and key pass, whose epilogues finish the unit-norm and MiPE backward; mma.sync m16n8k16 bf16.
#include "kernels/cuda/screening_tiled.h"

#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/screening_rows.cuh"
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
// The backward kernels: 48 KB of static shared memory per CTA (k̃, q̃ hi/lo, v̄ and ∂L/∂h
// hi/lo) allow 3 CTAs on sm_80 (164 KB per SM), so 3 (≤ 168 registers per thread).
constexpr int kBackwardCtasPerSm = 3;

// Sizes the kernels read; tokens of a (b, tile) task lie at (b·tiles + t)·T + i in the
// saved arrays and at row b·T + i of P and U (screening.cu's Dims).
struct TiledDims {
  int64_t batch, seq, tiles, pos0, mask_ld;
  bool tanh_norm;
  __host__ __device__ int64_t p_cols() const { return 2 * kDk + 2 * kDv; }
};

// ---- Pass 2: steps 7–13 on tensor cores ------------------------------------------

// −1/r for Trim, once per tile, 1/r capped at FLT_MAX so that a = 1 + (1 − s)·(−1/r) is 1
// at s = 1 for any r > 0 (as 1 − (1 − s)/r is) rather than 0·∞. The step loops multiply:
// an IEEE division per pair was 8 of a 16×16 step's instructions in SASS each.
__device__ inline float TrimNegReciprocal(float r) { return -fminf(1.f / r, 3.402823466e38f); }
// Trim's a = 1 − (1 − s)/r (spec step 8), by the reciprocal: within 2 ulp of the division.
// Bit for bit the earlier fma(s − 1, 1/r, 1) (rounding to nearest is symmetric: s − 1 and
// 1 − s round to opposite values); 1 − s is the query pass's ∂a/∂r factor, computed once.
__device__ inline float TrimA(float sim, float neg_inv_r) { return fmaf(1.f - sim, neg_inv_r, 1.f); }

__device__ inline uint16_t Bf16Bits(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
__device__ inline float Bf16Value(uint16_t bits) {
  return __bfloat162float(__ushort_as_bfloat16(bits));
}
// Two floats as one bf16 pair register, `low` in the low 16 bits (the fragments' order),
// each rounded to nearest even as Bf16Bits rounds it: one cvt.rn.bf16x2.f32 on sm_80+ (two
// cvt.rn.bf16.f32 and a mov.b32 as two Bf16Bits).
__device__ inline uint32_t PackBf16(float low, float high) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
  uint32_t bits;
  memcpy(&bits, &pair, sizeof bits);
  return bits;
}
// The two bf16 of a PackBf16 register as floats (x: the low one), exactly.
__device__ inline float2 UnpackBf16(uint32_t bits) {
  __nv_bfloat162 pair;
  memcpy(&pair, &bits, sizeof bits);
  return __bfloat1622float2(pair);
}

// Four fp32 values of a row as staged bf16: hi (two PackBf16 registers) and, when lo is
// given, lo = the rounding remainders x − bf16(x), likewise.
__device__ inline void StageSplit4(float4 x, uint32_t* hi, uint32_t* lo) {
  hi[0] = PackBf16(x.x, x.y);
  hi[1] = PackBf16(x.z, x.w);
  if (lo != nullptr) {
    lo[0] = PackBf16(x.x - Bf16Value(Bf16Bits(x.x)), x.y - Bf16Value(Bf16Bits(x.y)));
    lo[1] = PackBf16(x.z - Bf16Value(Bf16Bits(x.z)), x.w - Bf16Value(Bf16Bits(x.w)));
  }
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

// Rows [row0, row0 + 64) of a [·, kDv] fp32 array (v̄, ∂L/∂h) into shared bf16 `hi` at
// kStrideV (and `lo` = the rounding remainder, when given); rows at or past `valid` are
// zeros. Every thread of the CTA calls it.
__device__ inline void StageValueRows(const float* src, int64_t row0, int64_t valid, uint16_t* hi,
                                      uint16_t* lo = nullptr) {
  for (int e = threadIdx.x; e < kBlockK * (kDv / 4); e += kThreadsPerCta) {
    const int r = e / (kDv / 4), c = 4 * (e % (kDv / 4));
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (row0 + r < valid) x = *reinterpret_cast<const float4*>(src + (row0 + r) * kDv + c);
    StageSplit4(x, reinterpret_cast<uint32_t*>(&hi[r * kStrideV + c]),
                lo != nullptr ? reinterpret_cast<uint32_t*>(&lo[r * kStrideV + c]) : nullptr);
  }
}

// ---- Row loads from P: spec steps 5–6 on P's rows (screening_rows.cuh) -------------------
// The forward and both backward passes stage q̃, k̃ and v̄ by normalizing the P rows they load
// (nothing saved: the backward recomputes the forward's rows with the same arithmetic, bit
// for bit). A staged q̃ or k̃ row keeps its fp32 coordinates 0 and 1 in the row's padding
// (columns kDk … kDk + 3 of kStrideK hold two floats; ldmatrix reads columns 0 … kDk − 1):
// the query pass's MiPE rate term reads them (fp32 q̃_i[0..1], k̃_j[0..1]).
static_assert(kStrideK - kDk >= 4, "a staged unit row's padding holds its two fp32 head coordinates");
__device__ inline float2* RowHeadSlot(uint16_t* hi_row) { return reinterpret_cast<float2*>(hi_row + kDk); }
__device__ inline float2 RowHead(const uint16_t* hi_row) { return *reinterpret_cast<const float2*>(hi_row + kDk); }

// Elements x[0..3] of a row of P as fp32: one 16-byte load of fp32 P, one 8-byte load of bf16
// P (x 16- or 8-byte aligned: P's column blocks start at multiples of 4 elements).
__device__ inline float4 LoadRow4(const float* x) { return *reinterpret_cast<const float4*>(x); }
__device__ inline float4 LoadRow4(const __nv_bfloat16* x) {
  const uint2 bits = *reinterpret_cast<const uint2*>(x);
  const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits.x));
  const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}

// One row of P's q or k columns (x: kDk elements of PT, fp32 or bf16, global) through the
// unit norm and, when rotate, MiPE's rotation by (c, sn) (UnitRotateRow: NormalizeKernel's
// arithmetic, bit for bit on fp32 P) into z [kDk] (fp32: the simple kernel's saved q̃ or k̃
// row). Returns ‖x‖ (the simple kernel's saved norm).
template <typename PT>
__device__ inline float UnitRowFromP(const PT* x, bool rotate, double c, double sn, float* z) {
  float xr[kDk];
  #pragma unroll
  for (int i = 0; i < kDk; i += 4) {
    const float4 v = LoadRow4(x + i);
    xr[i] = v.x, xr[i + 1] = v.y, xr[i + 2] = v.z, xr[i + 3] = v.w;
  }
  return UnitRotateRow<kDk>(xr, z, rotate, c, sn, kDk);
}

// UnitRowFromP's row (and its ‖x‖, returned), staged to
// shared bf16 hi (and lo = the rounding remainder, when kSplit) as StageUnitRows stages a
// saved row; kHead: z[0], z[1] into the row's padding too (RowHead). Returns ‖x‖.
template <bool kSplit, bool kHead, typename PT>
__device__ inline float NormalizeUnitRow(const PT* x, bool rotate, double c, double sn, uint16_t* hi, uint16_t* lo,
                                         float* z) {
  const float n = UnitRowFromP(x, rotate, c, sn, z);
  #pragma unroll
  for (int i = 0; i < kDk; ++i) {
    const uint16_t h = Bf16Bits(z[i]);
    hi[i] = h;
    if (kSplit) lo[i] = Bf16Bits(z[i] - Bf16Value(h));
  }
  if (kHead) *RowHeadSlot(hi) = make_float2(z[0], z[1]);
  return n;
}

// A staged unit row past T: zeros (hi, lo when kSplit, and the padding's head when kHead).
template <bool kSplit, bool kHead>
__device__ inline void ZeroUnitRow(uint16_t* hi, uint16_t* lo) {
  #pragma unroll
  for (int i = 0; i < kDk; ++i) {
    hi[i] = 0;
    if (kSplit) lo[i] = 0;
  }
  if (kHead) *RowHeadSlot(hi) = make_float2(0.f, 0.f);
}

// Row j (< T) of a task's q (col = 0) or k (col = kDk) columns normalized and MiPE-rotated at
// position pos0 + j into a staged row, or zeros at or past T (NormalizeUnitRow, ZeroUnitRow).
template <bool kSplit, bool kHead, typename PT>
__device__ inline void StageUnitRowFromP(const PT* P, int64_t ldp, int col, int j, int T, double pos0, double rate,
                                         uint16_t* hi, uint16_t* lo) {
  if (j >= T) {
    ZeroUnitRow<kSplit, kHead>(hi, lo);
    return;
  }
  double c, sn;
  MipeCosSin(rate, pos0 + j, &c, &sn);
  float z[kDk];
  NormalizeUnitRow<kSplit, kHead>(P + j * ldp + col, rate != 0, c, sn, hi, lo, z);
}

// One row of P's v columns (x: kDv elements of PT, global) through the unit norm (RowNorm,
// UnitFactor: NormalizeKernel's arithmetic), read twice (the norm, then the scaled row: no
// 64-float row held in registers), to shared bf16 `hi` (and `lo` = the rounding remainder,
// when given) as StageValueRows stages the saved row (StageSplit4).
template <typename PT>
__device__ inline void NormalizeValueRow(const PT* x, uint16_t* hi, uint16_t* lo) {
  const float inv = UnitFactor(RowNorm<kDv>(x, kDv));
  #pragma unroll 4
  for (int i = 0; i < kDv; i += 4) {
    const float4 v = LoadRow4(x + i);
    StageSplit4(make_float4(v.x * inv, v.y * inv, v.z * inv, v.w * inv), reinterpret_cast<uint32_t*>(&hi[i]),
                lo != nullptr ? reinterpret_cast<uint32_t*>(&lo[i]) : nullptr);
  }
}

// Where the row loads read: task (b, t)'s rows of P (PT: float, or __nv_bfloat16 where the
// table's GEMM wrote P in bf16).
template <typename PT>
struct TaskRows {
  const PT* P;           // row i's block of tile t at P + i·ldp (q, k, v, g columns)
  int64_t ldp;           // tiles · p_cols()
  double pos0, rate;     // MiPE: token i's angle (pos0 + i)·rate (rate 0: no rotation)
};

// Rows [row0, row0 + 64) of the task's k and v columns normalized (steps 5–6) into shared
// k_hi/k_lo (kStrideK; kSplit) and v_hi/v_lo (kStrideV; v_lo null: hi only), as StageUnitRows
// and StageValueRows stage the saved k̃ and v̄; threads 0–63 take a k row each (kHead: its
// fp32 head too), 64–127 a v row; rows at or past T are zeros. Every thread of the CTA calls it.
template <bool kSplit, bool kHead, typename PT>
__device__ inline void NormalizeKeyRows(const TaskRows<PT>& task, int row0, int T, uint16_t* k_hi, uint16_t* k_lo,
                                        uint16_t* v_hi, uint16_t* v_lo) {
  const int r = threadIdx.x % kBlockK, j = row0 + r;
  if (threadIdx.x < kBlockK) {
    StageUnitRowFromP<kSplit, kHead>(task.P, task.ldp, kDk, j, T, task.pos0, task.rate, &k_hi[r * kStrideK],
                                     &k_lo[kSplit ? r * kStrideK : 0]);
  } else if (j >= T) {
    #pragma unroll
    for (int i = 0; i < kDv; ++i) {
      v_hi[r * kStrideV + i] = 0;
      if (v_lo != nullptr) v_lo[r * kStrideV + i] = 0;
    }
  } else {
    NormalizeValueRow(task.P + j * task.ldp + 2 * kDk, &v_hi[r * kStrideV],
                      v_lo != nullptr ? &v_lo[r * kStrideV] : nullptr);
  }
}

// A fragment of a 16×16 matrix held as two n-tiles of accumulators (x[0]: columns 0–7,
// x[1]: 8–15), rounded to bf16: `hi`, and when lo is given the rounding remainder.
__device__ inline void AccumulatorsAsA(const float x[2][4], uint32_t hi[4], uint32_t* lo) {
  #pragma unroll
  for (int n = 0; n < 2; ++n) {
    #pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float x0 = x[n][2 * half], x1 = x[n][2 * half + 1];
      const uint32_t h = PackBf16(x0, x1);
      hi[2 * n + half] = h;
      if (lo != nullptr) {  // the remainders from the packed hi: no second rounding of x0, x1
        const float2 back = UnpackBf16(h);
        lo[2 * n + half] = PackBf16(x0 - back.x, x1 - back.y);
      }
    }
  }
}

// acc[n] += A·B for the two n-tiles of a 16×16 B (b[0], b[1]: n-tile 0; b[2], b[3]:
// n-tile 1), as three products of the hi/lo split A = a_hi + a_lo, B = b_hi + b_lo
// (small terms first; a_lo·b_lo, ~2^-16 relative, dropped).
__device__ inline void MmaSplit(float acc[2][4], const uint32_t a_hi[4], const uint32_t a_lo[4], const uint32_t b_hi[4],
                                const uint32_t b_lo[4]) {
  #pragma unroll
  for (int n = 0; n < 2; ++n) {
    MmaM16N8K16Bf16(acc[n], a_lo, &b_hi[2 * n], acc[n]);
    MmaM16N8K16Bf16(acc[n], a_hi, &b_lo[2 * n], acc[n]);
    MmaM16N8K16Bf16(acc[n], a_hi, &b_hi[2 * n], acc[n]);
  }
}

// The pair quantities the forward computes and both backward kernels recompute on one 16×16
// step's fragments,
// element e of n-tile n at query i and key j (d = i − j): from s (fp32-accurate, the
// hi/lo split), a = 1 − (1 − s)/r; the pair is active (accepted and inside the window,
// 0 ≤ d < keys, i < T) unless a ≤ 0 (NaN stays active, as in the simple kernel).
// (m(d) is read where it is used, not kept per element: registers.)
struct PairTerms {
  float a;
  bool active;
};
__device__ inline PairTerms Pair(float sim, int i, int d, int T, int keys, float neg_inv_r) {
  const float a = TrimA(sim, neg_inv_r);
  return {a, i < T && unsigned(d) < unsigned(keys) && !(a <= 0.f)};  // 0 ≤ d < keys in one compare
}

// A lane's entries of a Softmask table (m or ∂m/∂w) for one 16×16 step. Its eight pair
// elements (n, e) lie at six distinct d, d = base + 8(ρ − 1) + kSign·(e % 2):
//   kSign = −1 (queries on the rows: the forward and the query pass), i = qw + g + 8(e/2),
//     j = kj + 8n + 2u + e % 2, ρ = e/2 − n + 1, base = qw + g − kj − 2u;
//   kSign = +1 (keys on the rows: the key pass), i = qi + 8n + 2u + e % 2,
//     j = kw + g + 8(e/2), ρ = n − e/2 + 1, base = qi + 2u − kw − g;
// so each is read once (per-pair reads took eight, two d twice).
template <int kSign>
struct LaneTable {
  float v[3][2];  // v[ρ][c]: the table at d = base + 8(ρ − 1) + kSign·c; 0 where not read
  // kAll: every d lies in [0, keys) (interior steps: no test); otherwise those outside read 0.
  // table: [keys] at least, from d = 0; base: d of element (0, 0).
  template <bool kAll>
  __device__ LaneTable(const float* table, int base, int keys, std::integral_constant<bool, kAll>) {
    #pragma unroll
    for (int rho = 0; rho < 3; ++rho) {
      #pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int d = base + 8 * (rho - 1) + kSign * c;
        v[rho][c] = kAll || unsigned(d) < unsigned(keys) ? table[d] : 0.f;
      }
    }
  }
  // The entry at element (n, e).
  __device__ float at(int n, int e) const { return v[kSign < 0 ? e / 2 - n + 1 : n - e / 2 + 1][e % 2]; }
};

// The rest of one step, body(pair, any, kInterior), on the pair terms of its fragments,
// pair[n][e] of query and key at(n, e) = (i, j), and whether any is active. `interior`
// (warp-uniform): every pair of the step lies inside the window, so a pair is active unless
// a ≤ 0 and the window tests are skipped (same terms); body runs in each arm, specialized
// (kInterior: std::true_type there, so that a LaneTable built with it reads without tests
// wherever the body places it, after its products: fewer registers live across them). The
// interior arm is the one `tools/ptxas_usage.py --step-loops` counts apart by the comment it
// holds.
template <typename At, typename Body>
__device__ inline void StepPairs(const float (&sim)[2][4], bool interior, int T, int keys, float neg_inv_r, At at,
                                 Body body) {
  PairTerms pair[2][4];
  bool any = false;
  if (interior) {
#ifndef MULTISCREEN_CUDA_EMULATED
    asm volatile("// screening step: interior");  // a PTX comment: no instruction
#endif
    #pragma unroll
    for (int n = 0; n < 2; ++n) {
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float a = TrimA(sim[n][e], neg_inv_r);
        pair[n][e] = {a, !(a <= 0.f)};
        any |= pair[n][e].active;
      }
    }
    body(pair, any, std::true_type{});
  } else {
    #pragma unroll
    for (int n = 0; n < 2; ++n) {
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int2 ij = at(n, e);
        pair[n][e] = Pair(sim[n][e], ij.x, ij.x - ij.y, T, keys, neg_inv_r);
        any |= pair[n][e].active;
      }
    }
    body(pair, any, std::false_type{});
  }
}

// One CTA: queries [q0, q0 + 64) of task (b, t); see screening_tiled.h for the scheme.
// Warp w owns queries qw = q0 + 16w …; lane = 4g + u (g = groupID, u = threadID_in_group)
// holds, per n-tile of 8 columns, rows qw + g and qw + g + 8, columns 2u and 2u + 1 of
// each accumulator (the C/D fragment of tensor_core.cuh).
// kNormalize: the CTA loads P's q, k and v rows and normalizes them itself (steps 5–6,
// NormalizeKeyRows) and writes no saved row (the tiled backward recomputes them from P: only
// saved h is written); otherwise it stages the saved rows NormalizeKernel wrote (the
// two-launch form).
// UT: U's element, float, or __nv_bfloat16 (issue 42: W_O's GEMM operand itself, each value
// the fp32 one rounded once to nearest even, as PackRounded rounds the fp32 U).
template <bool kSplit, bool kNormalize, typename PT, typename UT>
__global__ void __launch_bounds__(kThreadsPerCta, kCtasPerSm) TiledAggregateKernel(TiledDims s, const PT* P,
                                                                       const ScreeningTileParams* params,
                                                                       const float* mask,
                                                                       ScreeningSaved<float> saved, UT* U) {
  __shared__ __align__(16) uint16_t q_hi[kBlockQ * kStrideK];
  __shared__ __align__(16) uint16_t q_lo[kSplit ? kBlockQ * kStrideK : 8];
  __shared__ __align__(16) uint16_t k_hi[kBlockK * kStrideK];
  __shared__ __align__(16) uint16_t k_lo[kSplit ? kBlockK * kStrideK : 8];
  __shared__ __align__(16) uint16_t v_s[kBlockK * kStrideV];

  // Positions within a task fit 32 bits (T < 2^27, checked by the launch): the step
  // loops' index arithmetic is 32-bit; offsets into the saved arrays stay 64-bit.
  const int T = int(s.seq);
  const int64_t t = blockIdx.y, b = blockIdx.z, bt = b * s.tiles + t;
  const int q0 = int(blockIdx.x) * kBlockQ;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, u = lane % 4;
  const int qw = q0 + 16 * warp;
  const ScreeningTileParams tp = params[t];
  const int keys = int(tp.keys);  // min(⌈w⌉, T): key j reaches query i iff 0 ≤ i − j < keys
  const float neg_inv_r = TrimNegReciprocal(tp.r);
  const float* m = mask + t * s.mask_ld;
  const float* q_tilde = saved.q_tilde + bt * T * kDk;
  const float* k_tilde = saved.k_tilde + bt * T * kDk;
  const float* v_bar = saved.v_bar + bt * T * kDv;
  const int64_t ldp = s.tiles * s.p_cols();
  const TaskRows<PT> task{P + b * T * ldp + t * s.p_cols(), ldp, double(s.pos0), tp.rate};

  if constexpr (kNormalize) {  // the block's q rows, one per thread of warps 0–1
    const int r = threadIdx.x;
    if (r < kBlockQ) {
      StageUnitRowFromP<kSplit, false>(task.P, ldp, 0, q0 + r, T, task.pos0, task.rate, &q_hi[r * kStrideK],
                                       &q_lo[kSplit ? r * kStrideK : 0]);
    }
  } else {
    StageUnitRows<kSplit>(q_tilde, q0, T, q_hi, q_lo);
  }
  __syncthreads();
  // The warp's A fragments of q̃ (16 queries × d_K), held for the whole walk.
  uint32_t qa_hi[4], qa_lo[4] = {0, 0, 0, 0};
  LdmatrixX4(qa_hi, &q_hi[(16 * warp + lane % 16) * kStrideK + 8 * (lane / 16)]);
  if (kSplit) LdmatrixX4(qa_lo, &q_lo[(16 * warp + lane % 16) * kStrideK + 8 * (lane / 16)]);

  float h[kDv / 8][4];
  #pragma unroll
  for (int n = 0; n < kDv / 8; ++n) h[n][0] = h[n][1] = h[n][2] = h[n][3] = 0.f;

  const int q_last = (q0 + kBlockQ < T ? q0 + kBlockQ : T) - 1;
  const int j_first = q0 - keys + 1 > 0 ? q0 - keys + 1 : 0;
  for (int k0 = j_first / kBlockK * kBlockK; k0 <= q_last; k0 += kBlockK) {
    __syncthreads();  // every warp is done with the previous block
    if constexpr (kNormalize) {
      NormalizeKeyRows<kSplit, false>(task, k0, T, k_hi, k_lo, v_s, nullptr);
    } else {
      StageUnitRows<kSplit>(k_tilde, k0, T, k_hi, k_lo);
      StageValueRows(v_bar, k0, T, v_s);
    }
    __syncthreads();
    #pragma unroll 1
    for (int step = 0; step < kBlockK / 16; ++step) {
      const int kj = k0 + 16 * step;
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
      // Warp-uniform: every pair of the step is inside the window (i < T, 0 ≤ i − j < keys).
      const bool interior = qw + 15 < T && kj + 15 <= qw && qw + 15 - kj < keys;
      const auto at = [&](int n, int e) { return int2{qw + g + 8 * (e / 2), kj + 8 * n + 2 * u + e % 2}; };
      StepPairs(sim, interior, T, keys, neg_inv_r, at, [&](const PairTerms (&pair)[2][4], bool any, auto kInterior) {
        if (!__any_sync(0xffffffffu, any)) return;  // every pair rejected (Trim or the window): no value work
        const LaneTable<-1> mt(m, qw + g - kj - 2 * u, keys, kInterior);
        float weight[2][4];
        #pragma unroll
        for (int n = 0; n < 2; ++n) {
          #pragma unroll
          for (int e = 0; e < 4; ++e) {  // a select, not a branch per pair
            weight[n][e] = pair[n][e].active ? pair[n][e].a * pair[n][e].a * mt.at(n, e) : 0.f;
          }
        }
        // h += (α m) v̄: A = the weights (16 queries × 16 keys) straight from the
        // accumulators; B = v̄ rows kj … kj + 15 by ldmatrix.trans, 16 columns at a time.
        uint32_t wa[4];
        AccumulatorsAsA(weight, wa, nullptr);
        #pragma unroll
        for (int c16 = 0; c16 < kDv / 16; ++c16) {
          uint32_t vb[4];
          LdmatrixX4Trans(vb, &v_s[(16 * step + lane % 16) * kStrideV + 16 * c16 + 8 * (lane / 16)]);
          MmaM16N8K16Bf16(h[2 * c16], wa, &vb[0], h[2 * c16]);
          MmaM16N8K16Bf16(h[2 * c16 + 1], wa, &vb[2], h[2 * c16 + 1]);
        }
      });
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
    const PT* gate_in = P + (b * T + i) * s.tiles * C + t * C + 2 * kDk + kDv;
    float* h_out = saved.h + (bt * T + i) * kDv;
    UT* out = U + (b * T + i) * s.tiles * kDv + t * kDv;
    #pragma unroll
    for (int n = 0; n < kDv / 8; ++n) {
      float value[2];
      #pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int c = 8 * n + 2 * u + e;
        const float hv = h[n][2 * half + e];
        float gate, gate_dg;
        GateForwardAndDerivative(RowValue(gate_in[c]), &gate, &gate_dg);
        h_out[c] = hv;
        value[e] = tp.scale * hv * f * gate;
      }
      const int c = 8 * n + 2 * u;  // even: a bf16 pair is one aligned 32-bit store
      if constexpr (std::is_same_v<UT, float>) {
        out[c] = value[0];
        out[c + 1] = value[1];
      } else {
        static_assert(std::is_same_v<UT, __nv_bfloat16>, "U is fp32 or bf16");
        *reinterpret_cast<__nv_bfloat162*>(out + c) = __floats2bfloat162_rn(value[0], value[1]);
      }
    }
  }
}

// ---- Backward: steps 10–7 on tensor cores -----------------------------------------

// ---- Epilogues: the unit-norm and MiPE backward of finished rows (steps 6 and 5) --------
// A warp's 16 finished rows of a gradient, held as accumulator fragments acc[n][e] (n-tile n:
// columns 8n + 2u + e % 2, row g + 8(e / 2), g = lane / 4, u = lane % 4), are stored as fp32
// rows of `stride` floats in the warp's own part of a CTA's shared staging buffer (reused once
// the step loop is done), so that one lane per row can run screening_rows.cuh's row backward
// on them: the arithmetic of the five-launch form's NormalizeBackwardKernel on the same fp32
// inputs, bit for bit. stride = kCols + 1: the 16 lanes reading a column each hit distinct banks.
template <int kCols>
__device__ inline void StageFragmentRows(const float (*acc)[4], float* rows, int stride) {
  const int g = threadIdx.x % 32 / 4, u = threadIdx.x % 4;
  #pragma unroll
  for (int n = 0; n < kCols / 8; ++n) {
    #pragma unroll
    for (int e = 0; e < 4; ++e) rows[(g + 8 * (e / 2)) * stride + 8 * n + 2 * u + e % 2] = acc[n][e];
  }
}
constexpr int kFinishStrideK = kDk + 1;  // floats per staged row of ∂L/∂q̃, ∂L/∂k̃
constexpr int kFinishStrideV = kDv + 1;  // floats per staged row of ∂L/∂v̄

// The query pass's prologue (kFusedOutput): spec steps 13–11 backward for the CTA's own 64
// rows q0 … q0 + 63 of task (b, t), one row per thread of threads 0–63 (64–127 return at
// once): OutputRowBackward (screening_rows.cuh, OutputBackwardKernel's arithmetic, bit for
// bit) on saved h, P's g columns and dU's tile columns gives ∂L/∂g (into dP's g columns), the
// scale part (partial) and ∂L/∂h, which goes to dh [B, tiles, T, kDv] (global, for the key
// pass) and, split as StageValueRows would stage it, to the row's shared dh_hi/dh_lo from
// registers (no read-back). Rows at or past T: zeros staged, nothing written. DT: dP's
// element (float, or __nv_bfloat16: ∂L/∂g rounded once, RowStore).
template <typename PT, typename DT>
__device__ inline void OutputBackwardRows(TiledDims s, float scale, int64_t b, int64_t t, int q0, const PT* P,
                                          const float* dU, const float* h, DT* dP, float* dh, double* partial,
                                          uint16_t* dh_hi, uint16_t* dh_lo) {
  const int r = threadIdx.x, T = int(s.seq), i = q0 + r;
  if (r >= kBlockQ) return;
  uint32_t* hi_row = reinterpret_cast<uint32_t*>(&dh_hi[r * kStrideV]);
  uint32_t* lo_row = reinterpret_cast<uint32_t*>(&dh_lo[r * kStrideV]);
  if (i >= T) {
    #pragma unroll 4
    for (int c = 0; c < kDv; c += 4) StageSplit4(make_float4(0.f, 0.f, 0.f, 0.f), hi_row + c / 2, lo_row + c / 2);
    return;
  }
  const int64_t C = s.p_cols(), ldp = s.tiles * C, row = b * T + i, idx = (b * s.tiles + t) * T + i;
  float d[kDv];
  partial[idx * kScreeningParts + kScreeningPartScale] =
      OutputRowBackward<kDv>(h + idx * kDv, P + row * ldp + t * C + 2 * kDk + kDv, dU + row * s.tiles * kDv + t * kDv,
                             scale, s.tanh_norm, /*gate=*/true, dP + row * ldp + t * C + 2 * kDk + kDv, d, kDv);
  #pragma unroll
  for (int c = 0; c < kDv; c += 4) {
    const float4 x = make_float4(d[c], d[c + 1], d[c + 2], d[c + 3]);
    *reinterpret_cast<float4*>(dh + idx * kDv + c) = x;
    StageSplit4(x, hi_row + c / 2, lo_row + c / 2);
  }
}

// Query pass: a CTA of 4 warps per (64-query block, tile, sequence), warp w owning
// queries qw = q0 + 16w …, walks the 64-key blocks its window reaches (the forward's
// walk) and per active 16×16 step recomputes s = q̃·k̃ᵀ (split), a and m, and
//   ∂L/∂(αm)_ij = ∂L/∂h_i · v̄_j      (tensor cores: ∂L/∂h as A held in registers,
//                                      v̄ᵀ by ldmatrix, plain bf16, 4 k-steps of d_V),
//   ∂L/∂s_ij = ∂L/∂(αm)_ij m_ij a_ij 2/r,
//   ∂L/∂q̃_i += Σ_j ∂L/∂s_ij k̃_j    (tensor cores, ∂L/∂s and k̃ both hi/lo split),
// and the query's parts of ∂L/∂r (Σ ∂L/∂(αm) m 2a(1 − s)/r²), of ∂L/∂w through
// Softmask (Σ ∂L/∂(αm) a² ∂m/∂w) and of ∂L/∂rate: fp32 over a step's four pairs per row
// and lane, fp64 across steps (per-pair fp64 was 314 of the step loop's 768 PTX
// instructions), then summed over the row's four lanes.
// Writes the three parts to partial and, kFinishRows, ∂L/∂q into dP's q columns (the epilogue:
// MiPE and unit-norm backward of each finished row, one lane per row); otherwise ∂L/∂q̃ to d_q
// for NormalizeBackwardKernel (the five-launch form, kept for the tests' bit-for-bit check).
// kFusedOutput: the prologue (OutputBackwardRows) runs the output pass for the CTA's rows from
// P and dU and writes dh, dP's g columns and the scale parts; otherwise the CTA stages dh as
// the simple kernel's output pass wrote it (the four- and five-launch forms).
// kFromP: q̃, k̃ and v̄ are recomputed from P's q, k, v columns as the forward computed them
// (StageUnitRowFromP, NormalizeKeyRows; the q rows by threads 64–127 beside the prologue's
// output rows), with their fp32 heads for the MiPE rate term in the staged rows' padding, and
// the epilogue recomputes each row's q̃ and ‖q‖ (UnitRowFromP); nothing of `saved` but h is
// read. Otherwise the saved rows and norms are read (the earlier forms, kept for the tests'
// bit-for-bit check).
// DT: dP's element: float, or __nv_bfloat16 (the CUDA table's bf16 path: ∂L/∂P written as the
// projections' GEMM operand, each value the fp32 one rounded once to nearest even, RowStore).
template <bool kFinishRows, bool kFusedOutput, bool kFromP, typename PT, typename DT>
__global__ void __launch_bounds__(kThreadsPerCta, kBackwardCtasPerSm)
    TiledQueryBackwardKernel(TiledDims s, const ScreeningTileParams* params, const float* mask, const float* dmask,
                             ScreeningSaved<float> saved, const PT* P, const float* dU, float* dh, float* d_q,
                             DT* dP, double* partial) {
  __shared__ __align__(16) uint16_t q_hi[kBlockQ * kStrideK];
  __shared__ __align__(16) uint16_t q_lo[kBlockQ * kStrideK];
  __shared__ __align__(16) uint16_t dh_hi[kBlockQ * kStrideV];
  __shared__ __align__(16) uint16_t dh_lo[kBlockQ * kStrideV];
  __shared__ __align__(16) uint16_t k_hi[kBlockK * kStrideK];
  __shared__ __align__(16) uint16_t k_lo[kBlockK * kStrideK];
  __shared__ __align__(16) uint16_t v_hi[kBlockK * kStrideV];
  __shared__ __align__(16) uint16_t v_lo[kBlockK * kStrideV];

  const int T = int(s.seq);  // 32-bit positions, as the forward
  const int64_t t = blockIdx.y, b = blockIdx.z, bt = b * s.tiles + t;
  const int q0 = int(blockIdx.x) * kBlockQ;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, u = lane % 4;
  const int qw = q0 + 16 * warp;
  const ScreeningTileParams tp = params[t];
  const int keys = int(tp.keys);
  const float* m = mask + t * s.mask_ld;
  const float* dm = dmask + t * s.mask_ld;
  const float neg_inv_r = TrimNegReciprocal(tp.r);
  const float two_over_r = 2.f / tp.r;
  const double two_over_r2 = 2.0 / (double(tp.r) * tp.r);
  const float* k_tilde = saved.k_tilde + bt * T * kDk;
  const float* v_bar = saved.v_bar + bt * T * kDv;
  const int64_t ldp = s.tiles * s.p_cols();
  const TaskRows<PT> task{P + b * T * ldp + t * s.p_cols(), ldp, double(s.pos0), tp.rate};

  if constexpr (kFromP) {
    if (threadIdx.x >= kBlockQ) {  // threads 0–63 run the output rows (OutputBackwardRows)
      const int r = threadIdx.x - kBlockQ;
      StageUnitRowFromP<true, true>(task.P, ldp, 0, q0 + r, T, task.pos0, task.rate, &q_hi[r * kStrideK],
                                    &q_lo[r * kStrideK]);
    }
  } else {
    StageUnitRows<true>(saved.q_tilde + bt * T * kDk, q0, T, q_hi, q_lo);
  }
  if constexpr (kFusedOutput) {
    OutputBackwardRows(s, tp.scale, b, t, q0, P, dU, saved.h, dP, dh, partial, dh_hi, dh_lo);
  } else {
    StageValueRows(dh + bt * T * kDv, q0, T, dh_hi, dh_lo);
  }
  __syncthreads();
  uint32_t qa_hi[4], qa_lo[4];
  LdmatrixX4(qa_hi, &q_hi[(16 * warp + lane % 16) * kStrideK + 8 * (lane / 16)]);
  LdmatrixX4(qa_lo, &q_lo[(16 * warp + lane % 16) * kStrideK + 8 * (lane / 16)]);
  float dq[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
  double sum_r[2] = {0, 0}, sum_w[2] = {0, 0}, sum_rate[2] = {0, 0};  // rows qw + g, qw + g + 8
  float2 q01[2];  // q̃_i[0], −q̃_i[1] of the two rows, fp32 (negated once: (−x)·y is −(x·y) exactly)
  #pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t i = qw + g + 8 * half;
    if constexpr (kFromP) {
      const float2 head = RowHead(&q_hi[(i - q0) * kStrideK]);
      q01[half] = i < T ? make_float2(head.x, -head.y) : make_float2(0.f, 0.f);
    } else {
      q01[half] = i < T ? make_float2(saved.q_tilde[(bt * T + i) * kDk], -saved.q_tilde[(bt * T + i) * kDk + 1])
                        : make_float2(0.f, 0.f);
    }
  }
  const bool rotate = tp.rate != 0;

  const int q_last = (q0 + kBlockQ < T ? q0 + kBlockQ : T) - 1;
  const int j_first = q0 - keys + 1 > 0 ? q0 - keys + 1 : 0;
  for (int k0 = j_first / kBlockK * kBlockK; k0 <= q_last; k0 += kBlockK) {
    __syncthreads();  // every warp is done with the previous block
    if constexpr (kFromP) {
      NormalizeKeyRows<true, true>(task, k0, T, k_hi, k_lo, v_hi, v_lo);
    } else {
      StageUnitRows<true>(k_tilde, k0, T, k_hi, k_lo);
      StageValueRows(v_bar, k0, T, v_hi, v_lo);
    }
    __syncthreads();
    #pragma unroll 1
    for (int step = 0; step < kBlockK / 16; ++step) {
      const int kj = k0 + 16 * step;
      if (qw >= T || kj > qw + 15 || kj + 15 < qw - keys + 1) continue;  // warp-uniform, as the forward
      // s = q̃ k̃ᵀ (the forward's fragments).
      const int key_row = 16 * step + 8 * (lane / 16) + lane % 8, col = 8 * ((lane / 8) % 2);
      uint32_t kb_hi[4], kb_lo[4];
      LdmatrixX4(kb_hi, &k_hi[key_row * kStrideK + col]);
      LdmatrixX4(kb_lo, &k_lo[key_row * kStrideK + col]);
      float sim[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
      MmaSplit(sim, qa_hi, qa_lo, kb_hi, kb_lo);
      // Warp-uniform: every pair of the step is inside the window (i < T, 0 ≤ i − j < keys).
      const bool interior = qw + 15 < T && kj + 15 <= qw && qw + 15 - kj < keys;
      const auto at = [&](int n, int e) { return int2{qw + g + 8 * (e / 2), kj + 8 * n + 2 * u + e % 2}; };  // (i, j)
      StepPairs(sim, interior, T, keys, neg_inv_r, at, [&](const PairTerms (&pair)[2][4], bool any, auto kInterior) {
        if (!__any_sync(0xffffffffu, any)) return;  // every pair rejected: nothing flows back
        // ∂L/∂(αm) = ∂L/∂h v̄ᵀ (both split; ∂L/∂h's A fragments from shared memory per
        // step, not held: registers): B[c][j] = v̄_j[c], v̄ rows as stored ([n][k]): ldmatrix
        // as k̃.
        float dw[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        #pragma unroll 2  // fully unrolled, the four k-steps' fragments are live at once: ptxas spilled
        for (int kk = 0; kk < kDv / 16; ++kk) {
          uint32_t ha_hi[4], ha_lo[4], vb_hi[4], vb_lo[4];
          LdmatrixX4(ha_hi, &dh_hi[(16 * warp + lane % 16) * kStrideV + 16 * kk + 8 * (lane / 16)]);
          LdmatrixX4(ha_lo, &dh_lo[(16 * warp + lane % 16) * kStrideV + 16 * kk + 8 * (lane / 16)]);
          LdmatrixX4(vb_hi, &v_hi[key_row * kStrideV + 16 * kk + col]);
          LdmatrixX4(vb_lo, &v_lo[key_row * kStrideV + 16 * kk + col]);
          MmaSplit(dw, ha_hi, ha_lo, vb_hi, vb_lo);
        }
        // Per pair, straight-line: a rejected pair's ds is +0 and it adds ±0 (+0·x, x finite:
        // a rejected pair's s is not NaN) to the sums, which leaves them as the branch per pair
        // did, bit for bit, unless a sum is −0 (only an fp32 underflow makes one). m, then
        // ∂m/∂w, at the lane's six d, read after the products and one table at a time (fewer
        // registers live: with both read together ptxas spilled).
        const int base = qw + g - kj - 2 * u;
        float ds[2][4], dwaa[2][4], step_r[2] = {0.f, 0.f}, step_w[2] = {0.f, 0.f};
        {
          const LaneTable<-1> mt(m, base, keys, kInterior);
          #pragma unroll
          for (int n = 0; n < 2; ++n) {
            #pragma unroll
            for (int e = 0; e < 4; ++e) {
              const PairTerms& p = pair[n][e];
              const float dwa = dw[n][e] * p.a, dwam = p.active ? dwa * mt.at(n, e) : 0.f;
              ds[n][e] = dwam * two_over_r;
              step_r[e / 2] = fmaf(dwam, 1.f - sim[n][e], step_r[e / 2]);  // × 2/r² per step
              dwaa[n][e] = p.active ? dwa * p.a : 0.f;
            }
          }
        }
        const LaneTable<-1> dmt(dm, base, keys, kInterior);
        #pragma unroll
        for (int n = 0; n < 2; ++n) {
          #pragma unroll
          for (int e = 0; e < 4; ++e) step_w[e / 2] = fmaf(dwaa[n][e], dmt.at(n, e), step_w[e / 2]);
        }
        #pragma unroll
        for (int half = 0; half < 2; ++half) {
          sum_r[half] += double(step_r[half]) * two_over_r2;
          sum_w[half] += double(step_w[half]);
        }
        if (rotate) {  // MiPE's rate (tiles with w < w_th, short windows): warp-uniform, once per step
#ifndef MULTISCREEN_CUDA_EMULATED
          // a PTX comment: no instruction; tools/ptxas_usage.py --step-loops counts trips without it
          asm volatile("// screening step: MiPE rate");
#endif
          // k̃_j[0], k̃_j[1] of the step's four keys of this lane (j = kj + 8n + 2u + c), fp32,
          // for ∂s_ij/∂rate = (i − j)(q̃_i[0] k̃_j[1] − q̃_i[1] k̃_j[0]): kFromP from the staged
          // rows' padding (RowHead; zeros past T), otherwise from saved k̃ in global memory.
          float2 kv[2][2];
          #pragma unroll
          for (int n = 0; n < 2; ++n) {
            #pragma unroll
            for (int c = 0; c < 2; ++c) {
              const int j = kj + 8 * n + 2 * u + c;
              if constexpr (kFromP) {
                kv[n][c] = RowHead(&k_hi[(16 * step + 8 * n + 2 * u + c) * kStrideK]);
              } else {
                kv[n][c] = j < T ? *reinterpret_cast<const float2*>(k_tilde + j * kDk) : make_float2(0.f, 0.f);
              }
            }
          }
          float step_rate[2] = {0.f, 0.f};
          #pragma unroll
          for (int n = 0; n < 2; ++n) {
            #pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int d = qw + g + 8 * (e / 2) - (kj + 8 * n + 2 * u + e % 2);
              const float2 qv = q01[e / 2], kq = kv[n][e % 2];  // qv.y = −q̃_i[1]
              step_rate[e / 2] = fmaf(ds[n][e] * float(d), fmaf(qv.x, kq.y, qv.y * kq.x), step_rate[e / 2]);
            }
          }
          #pragma unroll
          for (int half = 0; half < 2; ++half) sum_rate[half] += double(step_rate[half]);
        }
        // ∂L/∂q̃ += ∂L/∂s k̃: B = k̃ rows kj … kj + 15 ([k][n]) by ldmatrix.trans.
        uint32_t da_hi[4], da_lo[4], kt_hi[4], kt_lo[4];
        AccumulatorsAsA(ds, da_hi, da_lo);
        LdmatrixX4Trans(kt_hi, &k_hi[(16 * step + lane % 16) * kStrideK + 8 * (lane / 16)]);
        LdmatrixX4Trans(kt_lo, &k_lo[(16 * step + lane % 16) * kStrideK + 8 * (lane / 16)]);
        MmaSplit(dq, da_hi, da_lo, kt_hi, kt_lo);
      });
    }
  }
  #pragma unroll
  for (int half = 0; half < 2; ++half) {  // the row's four lanes, in a fixed order
    sum_r[half] += __shfl_xor_sync(0xffffffffu, sum_r[half], 1);
    sum_r[half] += __shfl_xor_sync(0xffffffffu, sum_r[half], 2);
    sum_w[half] += __shfl_xor_sync(0xffffffffu, sum_w[half], 1);
    sum_w[half] += __shfl_xor_sync(0xffffffffu, sum_w[half], 2);
    sum_rate[half] += __shfl_xor_sync(0xffffffffu, sum_rate[half], 1);
    sum_rate[half] += __shfl_xor_sync(0xffffffffu, sum_rate[half], 2);
  }
  #pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t i = qw + g + 8 * half;
    if (i >= T) continue;
    if constexpr (!kFinishRows) {
      float* out = d_q + (bt * T + i) * kDk;
      #pragma unroll
      for (int n = 0; n < 2; ++n) {
        out[8 * n + 2 * u] = dq[n][2 * half];
        out[8 * n + 2 * u + 1] = dq[n][2 * half + 1];
      }
    }
    if (u == 0) {
      partial[(bt * T + i) * kScreeningParts + kScreeningPartR] = sum_r[half];
      partial[(bt * T + i) * kScreeningParts + kScreeningPartW] = sum_w[half];
      partial[(bt * T + i) * kScreeningParts + kScreeningPartRate] = sum_rate[half];
    }
  }
  if constexpr (kFinishRows) {
    // ∂L/∂q̃ is complete: each warp's 16 rows through dh_hi (every warp is done with it), then
    // MiPE (step 6) and the unit norm (step 5) backward into dP, one lane per row.
    static_assert(kWarps * 16 * kFinishStrideK * sizeof(float) <= sizeof(dh_hi), "staged ∂L/∂q̃ rows fit in dh_hi");
    __syncthreads();
    float* rows = reinterpret_cast<float*>(dh_hi) + warp * 16 * kFinishStrideK;
    StageFragmentRows<kDk>(dq, rows, kFinishStrideK);
    __syncwarp();
    const int i = qw + lane;
    if (lane >= 16 || i >= T) return;
    const double pos = double(s.pos0 + i);
    double c, sn;
    MipeCosSin(tp.rate, pos, &c, &sn);
    const int64_t C = s.p_cols();
    float z[kDk];  // kFromP: q̃_i and ‖q_i‖ as the forward computed them
    const float norm = kFromP ? UnitRowFromP(task.P + i * ldp, rotate, c, sn, z) : saved.q_norm[bt * T + i];
    FinishKeyOrQueryRowBackward<kDk>(kFromP ? z : saved.q_tilde + (bt * T + i) * kDk, norm,
                                     rows + lane * kFinishStrideK, rotate, c, sn, pos, nullptr,
                                     dP + (b * T + i) * s.tiles * C + t * C, kDk);
  }
}

// Key pass: a CTA of 4 warps per (64-key block, tile, sequence), warp w owning keys
// kw = k0 + 16w …, walks the 64-query blocks that reach its keys, [k0, k_last + keys − 1]
// ∩ [0, T), in ascending order, and per active 16×16 step recomputes the transposed
// pairs sᵀ = k̃·q̃ᵀ (split), a, m and ∂L/∂(αm)ᵀ = v̄·∂L/∂hᵀ (v̄ as A held in registers,
// plain bf16), then
//   ∂L/∂v̄_j += Σ_i (α m)_ij ∂L/∂h_i  (tensor cores, plain bf16: α m and ∂L/∂h),
//   ∂L/∂k̃_j += Σ_i ∂L/∂s_ij q̃_i      (tensor cores, ∂L/∂s and q̃ both hi/lo split).
// kFinishRows: writes ∂L/∂k and ∂L/∂v into dP's k and v columns (the epilogue: MiPE and
// unit-norm backward of k̃'s finished rows, unit-norm backward of v̄'s, one lane per key);
// otherwise ∂L/∂k̃ to d_k and ∂L/∂v̄ to d_v for NormalizeBackwardKernel (the five-launch form).
// kFromP: k̃, v̄ and q̃ recomputed from P's k, v and q columns as the forward computed them
// (NormalizeKeyRows, StageUnitRowFromP by threads 0–63 per query block), and in the epilogue
// each key's k̃, v̄ and norms (UnitRowFromP, UnitRotateRow); nothing of `saved` is read.
// Otherwise the saved rows and norms are read (the earlier forms, for the tests).
// DT: dP's element, as the query pass's.
template <bool kFinishRows, bool kFromP, typename PT, typename DT>
__global__ void __launch_bounds__(kThreadsPerCta, kBackwardCtasPerSm)
    TiledKeyBackwardKernel(TiledDims s, const ScreeningTileParams* params, const float* mask,
                           ScreeningSaved<float> saved, const PT* P, const float* dh, float* d_k, float* d_v,
                           DT* dP) {
  __shared__ __align__(16) uint16_t k_hi[kBlockK * kStrideK];
  __shared__ __align__(16) uint16_t k_lo[kBlockK * kStrideK];
  __shared__ __align__(16) uint16_t v_hi[kBlockK * kStrideV];
  __shared__ __align__(16) uint16_t v_lo[kBlockK * kStrideV];
  __shared__ __align__(16) uint16_t q_hi[kBlockQ * kStrideK];
  __shared__ __align__(16) uint16_t q_lo[kBlockQ * kStrideK];
  __shared__ __align__(16) uint16_t dh_hi[kBlockQ * kStrideV];
  __shared__ __align__(16) uint16_t dh_lo[kBlockQ * kStrideV];

  const int T = int(s.seq);  // 32-bit positions, as the forward
  const int64_t t = blockIdx.y, b = blockIdx.z, bt = b * s.tiles + t;
  const int k0 = int(blockIdx.x) * kBlockK;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, u = lane % 4;
  const int kw = k0 + 16 * warp;
  const ScreeningTileParams tp = params[t];
  const int keys = int(tp.keys);
  const float* m = mask + t * s.mask_ld;
  const float neg_inv_r = TrimNegReciprocal(tp.r);
  const float two_over_r = 2.f / tp.r;
  const float* q_tilde = saved.q_tilde + bt * T * kDk;
  const float* dh_t = dh + bt * T * kDv;
  const int64_t ldp = s.tiles * s.p_cols();
  const TaskRows<PT> task{P + b * T * ldp + t * s.p_cols(), ldp, double(s.pos0), tp.rate};

  if constexpr (kFromP) {
    NormalizeKeyRows<true, false>(task, k0, T, k_hi, k_lo, v_hi, v_lo);
  } else {
    StageUnitRows<true>(saved.k_tilde + bt * T * kDk, k0, T, k_hi, k_lo);
    StageValueRows(saved.v_bar + bt * T * kDv, k0, T, v_hi, v_lo);
  }
  __syncthreads();
  uint32_t ka_hi[4], ka_lo[4];
  LdmatrixX4(ka_hi, &k_hi[(16 * warp + lane % 16) * kStrideK + 8 * (lane / 16)]);
  LdmatrixX4(ka_lo, &k_lo[(16 * warp + lane % 16) * kStrideK + 8 * (lane / 16)]);
  float dk[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
  float dv[kDv / 8][4];
  #pragma unroll
  for (int n = 0; n < kDv / 8; ++n) dv[n][0] = dv[n][1] = dv[n][2] = dv[n][3] = 0.f;

  const int k_last = (k0 + kBlockK < T ? k0 + kBlockK : T) - 1;
  const int i_last = k_last + keys - 1 < T - 1 ? k_last + keys - 1 : T - 1;
  for (int q0 = k0; q0 <= i_last; q0 += kBlockQ) {
    __syncthreads();  // every warp is done with the previous block
    if constexpr (kFromP) {
      if (threadIdx.x < kBlockQ) {
        StageUnitRowFromP<true, false>(task.P, ldp, 0, q0 + int(threadIdx.x), T, task.pos0, task.rate,
                                       &q_hi[threadIdx.x * kStrideK], &q_lo[threadIdx.x * kStrideK]);
      }
    } else {
      StageUnitRows<true>(q_tilde, q0, T, q_hi, q_lo);
    }
    StageValueRows(dh_t, q0, T, dh_hi, dh_lo);
    __syncthreads();
    #pragma unroll 1
    for (int step = 0; step < kBlockQ / 16; ++step) {
      const int qi = q0 + 16 * step;
      // Warp-uniform: some pair (i, j), j in [kw, kw + 15] ∩ [0, T), i in [qi, qi + 15],
      // has 0 ≤ i − j < keys.
      if (kw >= T || qi + 15 < kw || qi > kw + 15 + keys - 1) continue;
      // sᵀ = k̃ q̃ᵀ for queries qi … qi + 15: B[x][i] = q̃_i[x], q̃ rows as stored.
      const int query_row = 16 * step + 8 * (lane / 16) + lane % 8, col = 8 * ((lane / 8) % 2);
      uint32_t qb_hi[4], qb_lo[4];
      LdmatrixX4(qb_hi, &q_hi[query_row * kStrideK + col]);
      LdmatrixX4(qb_lo, &q_lo[query_row * kStrideK + col]);
      float sim[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
      MmaSplit(sim, ka_hi, ka_lo, qb_hi, qb_lo);
      // Warp-uniform: every pair of the step is inside the window (i < T, 0 ≤ i − j < keys).
      const bool interior = qi + 15 < T && qi >= kw + 15 && qi + 15 - kw < keys;
      const auto at = [&](int n, int e) {
        return int2{qi + 8 * n + 2 * u + e % 2, kw + g + 8 * (e / 2)};  // row: key j; column: query i
      };
      StepPairs(sim, interior, T, keys, neg_inv_r, at, [&](const PairTerms (&pair)[2][4], bool any, auto kInterior) {
        if (!__any_sync(0xffffffffu, any)) return;  // every pair rejected: nothing flows back
        // ∂L/∂(αm)ᵀ = v̄ ∂L/∂hᵀ (both split; v̄'s A fragments from shared memory per step,
        // not held: registers): B[c][i] = ∂L/∂h_i[c], rows as stored.
        float dw[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        #pragma unroll 2  // fully unrolled, the four steps' fragments are live at once: sm_90 spilled
        for (int kk = 0; kk < kDv / 16; ++kk) {
          uint32_t va_hi[4], va_lo[4], hb_hi[4], hb_lo[4];
          LdmatrixX4(va_hi, &v_hi[(16 * warp + lane % 16) * kStrideV + 16 * kk + 8 * (lane / 16)]);
          LdmatrixX4(va_lo, &v_lo[(16 * warp + lane % 16) * kStrideV + 16 * kk + 8 * (lane / 16)]);
          LdmatrixX4(hb_hi, &dh_hi[query_row * kStrideV + 16 * kk + col]);
          LdmatrixX4(hb_lo, &dh_lo[query_row * kStrideV + 16 * kk + col]);
          MmaSplit(dw, va_hi, va_lo, hb_hi, hb_lo);
        }
        // m at the lane's six d, read after the products (fewer registers live across them).
        const LaneTable<1> mt(m, qi + 2 * u - kw - g, keys, kInterior);
        float weight[2][4], ds[2][4];
        #pragma unroll
        for (int n = 0; n < 2; ++n) {
          #pragma unroll
          for (int e = 0; e < 4; ++e) {
            const PairTerms& p = pair[n][e];  // selects, not a branch per pair
            const float mij = mt.at(n, e);
            weight[n][e] = p.active ? p.a * p.a * mij : 0.f;
            ds[n][e] = p.active ? dw[n][e] * mij * p.a * two_over_r : 0.f;
          }
        }
        // ∂L/∂v̄ += (αm)ᵀ ∂L/∂h and ∂L/∂k̃ += ∂L/∂sᵀ q̃: B = rows qi … qi + 15 ([k][n]) by
        // ldmatrix.trans.
        uint32_t wa[4];
        AccumulatorsAsA(weight, wa, nullptr);
        #pragma unroll
        for (int c16 = 0; c16 < kDv / 16; ++c16) {
          uint32_t hb[4];
          LdmatrixX4Trans(hb, &dh_hi[(16 * step + lane % 16) * kStrideV + 16 * c16 + 8 * (lane / 16)]);
          MmaM16N8K16Bf16(dv[2 * c16], wa, &hb[0], dv[2 * c16]);
          MmaM16N8K16Bf16(dv[2 * c16 + 1], wa, &hb[2], dv[2 * c16 + 1]);
        }
        uint32_t da_hi[4], da_lo[4], qt_hi[4], qt_lo[4];
        AccumulatorsAsA(ds, da_hi, da_lo);
        LdmatrixX4Trans(qt_hi, &q_hi[(16 * step + lane % 16) * kStrideK + 8 * (lane / 16)]);
        LdmatrixX4Trans(qt_lo, &q_lo[(16 * step + lane % 16) * kStrideK + 8 * (lane / 16)]);
        MmaSplit(dk, da_hi, da_lo, qt_hi, qt_lo);
      });
    }
  }
  if constexpr (kFinishRows) {
    // ∂L/∂k̃, ∂L/∂v̄ are complete: each warp's 16 rows of ∂L/∂k̃ through v_hi and of ∂L/∂v̄
    // through dh_hi (warps 0, 1) or dh_lo (warps 2, 3), every warp being done with them, then
    // steps 6 and 5 backward into dP, one lane per key (NormalizeBackwardKernel's order: k̃, v̄).
    static_assert(kWarps * 16 * kFinishStrideK * sizeof(float) <= sizeof(v_hi), "staged ∂L/∂k̃ rows fit in v_hi");
    static_assert(2 * 16 * kFinishStrideV * sizeof(float) <= sizeof(dh_hi), "two warps' ∂L/∂v̄ rows fit in dh_hi");
    __syncthreads();
    float* k_rows = reinterpret_cast<float*>(v_hi) + warp * 16 * kFinishStrideK;
    float* v_rows = reinterpret_cast<float*>(warp < 2 ? dh_hi : dh_lo) + warp % 2 * 16 * kFinishStrideV;
    StageFragmentRows<kDk>(dk, k_rows, kFinishStrideK);
    StageFragmentRows<kDv>(dv, v_rows, kFinishStrideV);
    __syncwarp();
    const int j = kw + lane;
    if (lane >= 16 || j >= T) return;
    const double pos = double(s.pos0 + j);
    double c, sn;
    MipeCosSin(tp.rate, pos, &c, &sn);
    const int64_t C = s.p_cols();
    DT* dPj = dP + (b * T + j) * s.tiles * C + t * C;
    if constexpr (kFromP) {  // k̃_j, v̄_j and their norms as the forward computed them
      float z[kDk], v[kDv];
      const float k_norm = UnitRowFromP(task.P + j * ldp + kDk, tp.rate != 0, c, sn, z);
      FinishKeyOrQueryRowBackward<kDk>(z, k_norm, k_rows + lane * kFinishStrideK, tp.rate != 0, c, sn, pos, nullptr,
                                       dPj + kDk, kDk);
      const float v_norm = UnitRotateRow<kDv>(task.P + j * ldp + 2 * kDk, v, false, 1, 0, kDv);
      NormalizeRotateBackwardRow<kDv>(v, v_norm, v_rows + lane * kFinishStrideV, false, 1, 0, dPj + 2 * kDk, kDv);
    } else {
      FinishKeyOrQueryRowBackward<kDk>(saved.k_tilde + (bt * T + j) * kDk, saved.k_norm[bt * T + j],
                                       k_rows + lane * kFinishStrideK, tp.rate != 0, c, sn, pos, nullptr, dPj + kDk,
                                       kDk);
      NormalizeRotateBackwardRow<kDv>(saved.v_bar + (bt * T + j) * kDv, saved.v_norm[bt * T + j],
                                      v_rows + lane * kFinishStrideV, false, 1, 0, dPj + 2 * kDk, kDv);
    }
  } else {
    #pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t j = kw + g + 8 * half;
      if (j >= T) continue;
      float* out_k = d_k + (bt * T + j) * kDk;
      float* out_v = d_v + (bt * T + j) * kDv;
      #pragma unroll
      for (int n = 0; n < 2; ++n) {
        out_k[8 * n + 2 * u] = dk[n][2 * half];
        out_k[8 * n + 2 * u + 1] = dk[n][2 * half + 1];
      }
      #pragma unroll
      for (int n = 0; n < kDv / 8; ++n) {
        out_v[8 * n + 2 * u] = dv[n][2 * half];
        out_v[8 * n + 2 * u + 1] = dv[n][2 * half + 1];
      }
    }
  }
}

// Whether the tiled kernels take `shape`: d_K = 16, d_V = 64, MiPE and the gate (issue
// 30's ablations run the simple kernel), T < 2^27 (32-bit positions in the step loops).
bool TiledShape(const ScreeningShape& shape) {
  return shape.d_k == kDk && shape.d_v == kDv && shape.position == PositionKind::kMipe && shape.output_gate &&
         shape.seq < (int64_t{1} << 27);
}

// kNormalize: one launch, the aggregate kernel normalizing the rows it loads (the tile tables
// uploaded first); otherwise the two-launch form, the simple kernel's normalize pass
// (ScreeningNormalize, which uploads the tables) then the aggregate kernel on saved rows.
// PT: P's element, float, or __nv_bfloat16 (the one-launch form only; the simple kernels
// read fp32 P, so a bf16 P of a shape they would take is a caller's bug: fatal). UT: U's
// element, float, or __nv_bfloat16 (likewise: the simple kernels write fp32 U).
template <bool kSplit, bool kNormalize, typename PT, typename UT = float>
void Forward(const ScreeningShape& shape, const PT* P, const TileScalars* tiles, const ScreeningSaved<float>& saved,
             UT* U, ScreeningScratch* scratch, cudaStream_t stream) {
  static_assert(std::is_same_v<PT, float> || kNormalize, "the two-launch form reads fp32 P");
  static_assert(std::is_same_v<UT, float> || kNormalize, "the two-launch form writes fp32 U");
  if (shape.batch <= 0 || shape.seq <= 0 || shape.tiles <= 0) return;
  if (!TiledShape(shape)) {
    if constexpr (std::is_same_v<PT, float> && std::is_same_v<UT, float>) {
      ScreeningForward(shape, P, tiles, saved, U, scratch, stream);
      return;
    } else {
      FatalCudaError("ScreeningTiledForward",
                     "a bf16 P or U for a shape the tiled kernels do not take (ScreeningTiledShape)");
    }
  }
  if constexpr (kNormalize) {
    ScreeningUploadTables(shape, tiles, scratch, stream);
  } else {
    ScreeningNormalize(shape, P, tiles, saved, scratch, stream);
  }
  const TiledDims s{shape.batch, shape.seq, shape.tiles, shape.pos0, scratch->current->mask_ld, shape.tanh_norm};
  const dim3 grid(static_cast<unsigned>((s.seq + kBlockQ - 1) / kBlockQ), static_cast<unsigned>(s.tiles),
                  static_cast<unsigned>(s.batch));
  Launch<TiledAggregateKernel<kSplit, kNormalize, PT, UT>>(grid, kThreadsPerCta, 0, stream, s, P,
                                                           scratch->current->params, scratch->current->mask, saved, U);
  MS_CUDA_CHECK_LAUNCH("ScreeningTiledForward");
}

// The backward's forms: kThree, the output pass in the query pass's prologue (the model's);
// kFour, the simple kernel's output pass first; kFive, that and the rows finished by
// NormalizeBackwardKernel from scratch d_q, d_k, d_v (the last two kept for the tests'
// bit-for-bit checks of the fusions).
// kThreeSavedRows: kThree reading the saved q̃, k̃, v̄ and norms (the form before the passes
// recomputed them from P; kept for the tests' bit-for-bit check).
enum class BackwardForm { kThree, kThreeSavedRows, kFour, kFive };

// kThree: three launches (query pass with the output pass as its prologue, key pass,
// reduction); kFour: four (output pass, query pass, key pass, reduction), the rows finished in
// the window passes' epilogues; kFive: five, the rows finished by NormalizeBackwardKernel.
// PT as Forward's: a bf16 P for the three-launch form from P only. DT: dP's element, float or
// __nv_bfloat16 (from a bf16 P only: the three-launch form writes every element of dP in its
// two passes, the earlier forms and the simple kernels fp32).
template <BackwardForm kForm, typename PT, typename DT = float>
void Backward(const ScreeningShape& shape, const PT* P, const TileScalars* tiles, const ScreeningSaved<float>& saved,
              const float* dU, DT* dP, TileScalarGradsOut grads, ScreeningScratch* scratch, cudaStream_t stream) {
  static_assert(std::is_same_v<PT, float> || kForm == BackwardForm::kThree, "the earlier forms read fp32 P");
  static_assert(std::is_same_v<DT, float> || !std::is_same_v<PT, float>, "a bf16 dP from a bf16 P only");
  if (!TiledShape(shape)) {
    if constexpr (std::is_same_v<PT, float>) {
      ScreeningBackward(shape, P, tiles, saved, dU, dP, grads, scratch, stream);
      return;
    } else {
      FatalCudaError("ScreeningTiledBackward", "a bf16 P for a shape the tiled kernels do not take (ScreeningTiledShape)");
    }
  }
  constexpr bool kFinishRows = kForm != BackwardForm::kFive;
  constexpr bool kFusedOutput = kForm == BackwardForm::kThree || kForm == BackwardForm::kThreeSavedRows;
  constexpr bool kFromP = kForm == BackwardForm::kThree;
  if constexpr (kFusedOutput) {
    // Tables uploaded, scratch sized; the query pass's prologue runs the output pass.
    if (!ScreeningBackwardPrepare(shape, tiles, grads, scratch, stream)) return;
  } else if constexpr (std::is_same_v<PT, float>) {
    // The simple kernel's output pass (∂L/∂h, ∂L/∂g, the scale parts; tables uploaded).
    if (!ScreeningBackwardBegin(shape, P, tiles, saved, dU, dP, grads, scratch, stream)) return;
  }
  if constexpr (!kFinishRows) {
    const int64_t tokens = shape.batch * shape.tiles * shape.seq;
    scratch->d_q.Resize(tokens * kDk);
    scratch->d_k.Resize(tokens * kDk);
    scratch->d_v.Resize(tokens * kDv);
  }
  const TiledDims s{shape.batch, shape.seq, shape.tiles, shape.pos0, scratch->current->mask_ld, shape.tanh_norm};
  const dim3 grid(static_cast<unsigned>((s.seq + kBlockQ - 1) / kBlockQ), static_cast<unsigned>(s.tiles),
                  static_cast<unsigned>(s.batch));
  Launch<TiledQueryBackwardKernel<kFinishRows, kFusedOutput, kFromP, PT, DT>>(
      grid, kThreadsPerCta, 0, stream, s, scratch->current->params, scratch->current->mask, scratch->current->dmask,
      saved, P, dU, scratch->dh.data(), scratch->d_q.data(), dP, scratch->partial.data());
  MS_CUDA_CHECK_LAUNCH("ScreeningTiledBackward");
  Launch<TiledKeyBackwardKernel<kFinishRows, kFromP, PT, DT>>(grid, kThreadsPerCta, 0, stream, s,
                                                          scratch->current->params, scratch->current->mask, saved, P,
                                                          scratch->dh.data(), scratch->d_k.data(),
                                                          scratch->d_v.data(), dP);
  MS_CUDA_CHECK_LAUNCH("ScreeningTiledBackward");
  if constexpr (kFinishRows) {
    ScreeningBackwardReduce(shape, grads, scratch, stream);  // the fixed-order reduction
  } else {
    // The simple kernel's unit-norm and MiPE backward into dP and its fixed-order reduction.
    ScreeningBackwardFinish(shape, saved, dP, grads, scratch, stream);
  }
}

}  // namespace

void ScreeningTiledForward(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                           const ScreeningSaved<float>& saved, float* U, ScreeningScratch* scratch,
                           cudaStream_t stream) {
  Forward<true, true>(shape, P, tiles, saved, U, scratch, stream);
}

bool ScreeningTiledShape(const ScreeningShape& shape) { return TiledShape(shape); }

void ScreeningTiledForwardBf16P(const ScreeningShape& shape, const uint16_t* P16, const TileScalars* tiles,
                                const ScreeningSaved<float>& saved, float* U, ScreeningScratch* scratch,
                                cudaStream_t stream) {
  Forward<true, true>(shape, reinterpret_cast<const __nv_bfloat16*>(P16), tiles, saved, U, scratch, stream);
}

void ScreeningTiledForwardBf16PU(const ScreeningShape& shape, const uint16_t* P16, const TileScalars* tiles,
                                 const ScreeningSaved<float>& saved, uint16_t* U16, ScreeningScratch* scratch,
                                 cudaStream_t stream) {
  Forward<true, true>(shape, reinterpret_cast<const __nv_bfloat16*>(P16), tiles, saved,
                      reinterpret_cast<__nv_bfloat16*>(U16), scratch, stream);
}

void ScreeningTiledBackwardBf16P(const ScreeningShape& shape, const uint16_t* P16, const TileScalars* tiles,
                                 const ScreeningSaved<float>& saved, const float* dU, float* dP,
                                 TileScalarGradsOut grads, ScreeningScratch* scratch, cudaStream_t stream) {
  Backward<BackwardForm::kThree>(shape, reinterpret_cast<const __nv_bfloat16*>(P16), tiles, saved, dU, dP, grads,
                                 scratch, stream);
}

void ScreeningTiledBackwardBf16PDP(const ScreeningShape& shape, const uint16_t* P16, const TileScalars* tiles,
                                   const ScreeningSaved<float>& saved, const float* dU, uint16_t* dP16,
                                   TileScalarGradsOut grads, ScreeningScratch* scratch, cudaStream_t stream) {
  Backward<BackwardForm::kThree>(shape, reinterpret_cast<const __nv_bfloat16*>(P16), tiles, saved, dU,
                                 reinterpret_cast<__nv_bfloat16*>(dP16), grads, scratch, stream);
}

void ScreeningTiledForwardPlainBf16Similarity(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                                              const ScreeningSaved<float>& saved, float* U,
                                              ScreeningScratch* scratch, cudaStream_t stream) {
  Forward<false, true>(shape, P, tiles, saved, U, scratch, stream);
}

void ScreeningTiledForwardTwoLaunches(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                                      const ScreeningSaved<float>& saved, float* U, ScreeningScratch* scratch,
                                      cudaStream_t stream) {
  Forward<true, false>(shape, P, tiles, saved, U, scratch, stream);
}

void ScreeningTiledForwardPlainBf16SimilarityTwoLaunches(const ScreeningShape& shape, const float* P,
                                                         const TileScalars* tiles, const ScreeningSaved<float>& saved,
                                                         float* U, ScreeningScratch* scratch, cudaStream_t stream) {
  Forward<false, false>(shape, P, tiles, saved, U, scratch, stream);
}

void ScreeningTiledBackward(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                            const ScreeningSaved<float>& saved, const float* dU, float* dP, TileScalarGradsOut grads,
                            ScreeningScratch* scratch, cudaStream_t stream) {
  Backward<BackwardForm::kThree>(shape, P, tiles, saved, dU, dP, grads, scratch, stream);
}

void ScreeningTiledBackwardSavedRows(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                                     const ScreeningSaved<float>& saved, const float* dU, float* dP,
                                     TileScalarGradsOut grads, ScreeningScratch* scratch, cudaStream_t stream) {
  Backward<BackwardForm::kThreeSavedRows>(shape, P, tiles, saved, dU, dP, grads, scratch, stream);
}

void ScreeningTiledBackwardFourLaunches(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                                        const ScreeningSaved<float>& saved, const float* dU, float* dP,
                                        TileScalarGradsOut grads, ScreeningScratch* scratch, cudaStream_t stream) {
  Backward<BackwardForm::kFour>(shape, P, tiles, saved, dU, dP, grads, scratch, stream);
}

void ScreeningTiledBackwardFiveLaunches(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                                        const ScreeningSaved<float>& saved, const float* dU, float* dP,
                                        TileScalarGradsOut grads, ScreeningScratch* scratch, cudaStream_t stream) {
  Backward<BackwardForm::kFive>(shape, P, tiles, saved, dU, dP, grads, scratch, stream);
}

}  // namespace multiscreen::kernels::cuda
