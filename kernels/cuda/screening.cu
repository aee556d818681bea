// Screening forward and backward on a CUDA device (screening.h): one thread per
// (sequence, tile, token) in every pass; per-tile tables (Softmask, MiPE rate) made on
// the host with the CPU's own functions (screening_tables.h), uploaded once per distinct
// content and kept on the device (screening_table_cache.h).
#include "kernels/cuda/screening.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/screening_rows.cuh"
#include "kernels/cuda/screening_tables.h"

namespace multiscreen::kernels::cuda {
namespace {

constexpr int kBlock = 128;
constexpr int kMaxDk = 64;
constexpr int kMaxDv = 256;

// The per-token parts of the tile-scalar gradients, summed per (sequence, tile) (screening.h).
constexpr int kPartScale = kScreeningPartScale, kPartR = kScreeningPartR, kPartW = kScreeningPartW,
              kPartRate = kScreeningPartRate, kParts = kScreeningParts;

// Sizes every kernel reads. Tokens of a (b, tile) task lie at bt·T + i in the saved
// arrays (bt = b·tiles + t) and at row b·T + i of P, dP, U and dU.
struct Dims {
  int64_t batch, seq, tiles, pos0, mask_ld;
  int dk, dv;
  bool tanh_norm;  // ScreeningShape::tanh_norm: false = identity in place of TanhNorm
  bool rope;       // ScreeningShape::position == kRope (kNope: FillScreeningTables zeroes the MiPE rates)
  bool gate;       // ScreeningShape::output_gate: false = no g columns, u not gated
  // Position ROPE: [dk/2] pair p's frequency θ'_p on the device (ScreeningTables::rope_freq,
  // made by FillScreeningTables; YaRN's at inference); null otherwise.
  const double* rope_freq;
  __host__ __device__ int64_t p_cols() const { return 2 * int64_t(dk) + (gate ? 2 : 1) * int64_t(dv); }
};

// Index of one token: i (position in the sequence), bt, t (tile), b (sequence).
struct Token {
  int64_t i, bt, t, b;
  __device__ Token(int64_t idx, const Dims& s) : i(idx % s.seq), bt(idx / s.seq), t(bt % s.tiles), b(bt / s.tiles) {}
};

template <int D>
__device__ inline float Dot(const float* a, const float* b, int d_rt) {
  const int d = D > 0 ? D : d_rt;
  float s = 0.f;
  #pragma unroll
  for (int c = 0; c < d; ++c) s += a[c] * b[c];
  return s;
}

// Trim (spec step 8): α = a², a = 1 − (1 − s)/r; the pair is rejected when a ≤ 0.
__device__ inline float TrimBase(float s, float r) { return 1.f - (1.f - s) / r; }

// Forward, pass 1: q̃, k̃ (unit, rotated), v̄ and the three norms of every token
// (screening_rows.cuh's row arithmetic, which the tiled forward's row loads share).
template <int DK, int DV>
__global__ void NormalizeKernel(Dims s, const float* P, const ScreeningTileParams* params, ScreeningSaved<float> saved) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= s.batch * s.tiles * s.seq) return;
  const Token tok(idx, s);
  const int dk = DK > 0 ? DK : s.dk, dv = DV > 0 ? DV : s.dv;
  const int64_t C = s.p_cols();
  const float* p = P + (tok.b * s.seq + tok.i) * s.tiles * C + tok.t * C;
  const double rate = params[tok.t].rate, pos = double(s.pos0 + tok.i);
  double c, sn;
  MipeCosSin(rate, pos, &c, &sn);
  saved.q_norm[idx] = UnitRotateRow<DK>(p, saved.q_tilde + idx * dk, rate != 0, c, sn, dk);
  saved.k_norm[idx] = UnitRotateRow<DK>(p + dk, saved.k_tilde + idx * dk, rate != 0, c, sn, dk);
  saved.v_norm[idx] = UnitRotateRow<DV>(p + 2 * dk, saved.v_bar + idx * dv, false, 1, 0, dv);
  if (rate == 0 && s.rope) {
    RopeTurnRow(saved.q_tilde + idx * dk, dk, pos, 1.0, s.rope_freq);
    RopeTurnRow(saved.k_tilde + idx * dk, dk, pos, 1.0, s.rope_freq);
  }
}

// Forward, pass 2: h_i = Σ_j α_ij m_ij v̄_j over the window (saved), then
// U = scale · TanhNorm(h) ⊙ tanh(SiLU(g)).
template <int DK, int DV>
__global__ void AggregateKernel(Dims s, const float* P, const ScreeningTileParams* params, const float* mask,
                                ScreeningSaved<float> saved, float* U) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= s.batch * s.tiles * s.seq) return;
  const Token tok(idx, s);
  const int dk = DK > 0 ? DK : s.dk, dv = DV > 0 ? DV : s.dv;
  const ScreeningTileParams tp = params[tok.t];
  const float* m = mask + tok.t * s.mask_ld;  // m[d], d = i − j
  float q[DK > 0 ? DK : kMaxDk];
  #pragma unroll
  for (int x = 0; x < dk; ++x) q[x] = saved.q_tilde[idx * dk + x];
  float h[DV > 0 ? DV : kMaxDv];
  #pragma unroll
  for (int x = 0; x < dv; ++x) h[x] = 0.f;
  const int64_t base = tok.bt * s.seq;
  const int64_t j0 = tok.i - tp.keys + 1 > 0 ? tok.i - tp.keys + 1 : 0;
  for (int64_t j = j0; j <= tok.i; ++j) {
    const float a = TrimBase(Dot<DK>(q, saved.k_tilde + (base + j) * dk, dk), tp.r);
    const float weight = a <= 0.f ? 0.f : a * a * m[tok.i - j];  // NaN stays NaN
    if (weight == 0.f) continue;  // rejected: no value work
    const float* v = saved.v_bar + (base + j) * dv;
    #pragma unroll
    for (int x = 0; x < dv; ++x) h[x] += weight * v[x];
  }
  float* h_out = saved.h + idx * dv;
  float sq = 0.f;
  #pragma unroll
  for (int x = 0; x < dv; ++x) {
    h_out[x] = h[x];
    sq += h[x] * h[x];
  }
  float f = 1.f, unused;
  if (s.tanh_norm) TanhNormScale(sqrtf(sq), &f, &unused);
  const int64_t C = s.p_cols();
  const float* g = P + (tok.b * s.seq + tok.i) * s.tiles * C + tok.t * C + 2 * dk + dv;  // read only with the gate
  float* out = U + (tok.b * s.seq + tok.i) * s.tiles * dv + tok.t * dv;
  #pragma unroll
  for (int x = 0; x < dv; ++x) {
    float gate = 1.f, gate_dg;
    if (s.gate) GateForwardAndDerivative(g[x], &gate, &gate_dg);
    out[x] = tp.scale * h[x] * f * gate;
  }
}

// Backward, output pass: output scale and gate (steps 13–12) and TanhNorm (step 11)
// give ∂L/∂h_i (written to dh_out) and ∂L/∂g (into dP); writes the token's part of the
// scale gradient.
template <int DK, int DV>
__global__ void OutputBackwardKernel(Dims s, const float* P, const float* dU, const ScreeningTileParams* params,
                                     ScreeningSaved<float> saved, float* dP, float* dh_out, double* partial) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= s.batch * s.tiles * s.seq) return;
  const Token tok(idx, s);
  const int dk = DK > 0 ? DK : s.dk, dv = DV > 0 ? DV : s.dv;
  const ScreeningTileParams tp = params[tok.t];
  const int64_t C = s.p_cols(), ldp = s.tiles * C;
  const int64_t row = tok.b * s.seq + tok.i;
  float dh[DV > 0 ? DV : kMaxDv];  // ∂L/∂h (screening_rows.cuh's row arithmetic, the tiled prologue's)
  partial[idx * kParts + kPartScale] =
      OutputRowBackward<DV>(saved.h + idx * dv, P + row * ldp + tok.t * C + 2 * dk + dv,
                            dU + row * s.tiles * dv + tok.t * dv, tp.scale, s.tanh_norm, s.gate,
                            dP + row * ldp + tok.t * C + 2 * dk + dv, dh, dv);
  #pragma unroll
  for (int c = 0; c < dv; ++c) dh_out[idx * dv + c] = dh[c];
}

// Backward, query pass: the window's pairs are recomputed from ∂L/∂h_i (the output
// pass's) and ∂L/∂q̃_i is finished through MiPE and the unit norm into dP. Writes the
// query's parts of the r and w gradients and of ∂L/∂rate, the latter pair by pair:
// s_ij turns with φ_i − φ_j = (i − j)·rate, so ∂s_ij/∂rate = (i − j)(q̃_i[0] k̃_j[1] −
// q̃_i[1] k̃_j[0]) (the tiled kernel's sum, exact at any pos0; the per-row form
// Σ_i pos_i (q̃_i × ∂L/∂q̃_i) + Σ_j pos_j (k̃_j × ∂L/∂k̃_j), equal in exact arithmetic, has
// halves that grow with pos0 and cancel: 3.7e-3 off fp64's ∂L/∂w at pos0 = 70000).
template <int DK, int DV>
__global__ void QueryBackwardKernel(Dims s, const ScreeningTileParams* params, const float* mask, const float* dmask,
                                   ScreeningSaved<float> saved, const float* dh_in, float* dP, double* partial) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= s.batch * s.tiles * s.seq) return;
  const Token tok(idx, s);
  const int dk = DK > 0 ? DK : s.dk, dv = DV > 0 ? DV : s.dv;
  const ScreeningTileParams tp = params[tok.t];
  const int64_t C = s.p_cols(), ldp = s.tiles * C;
  const int64_t row = tok.b * s.seq + tok.i;
  float dh[DV > 0 ? DV : kMaxDv];
  #pragma unroll
  for (int c = 0; c < dv; ++c) dh[c] = dh_in[idx * dv + c];
  // Steps 7–10 over the window [j0, i], relevance recomputed.
  const float* m = mask + tok.t * s.mask_ld;
  const float* dm = dmask + tok.t * s.mask_ld;
  float q[DK > 0 ? DK : kMaxDk], dq[DK > 0 ? DK : kMaxDk];
  #pragma unroll
  for (int x = 0; x < dk; ++x) {
    q[x] = saved.q_tilde[idx * dk + x];
    dq[x] = 0.f;
  }
  const float two_over_r = 2.f / tp.r;
  const double inv_r2 = 1.0 / (double(tp.r) * tp.r);
  const bool rotate = tp.rate != 0;
  double sum_r = 0, sum_w = 0, d_rate = 0;
  const int64_t base = tok.bt * s.seq;
  const int64_t j0 = tok.i - tp.keys + 1 > 0 ? tok.i - tp.keys + 1 : 0;
  for (int64_t j = j0; j <= tok.i; ++j) {
    const float* kj = saved.k_tilde + (base + j) * dk;
    const float sim = Dot<DK>(q, kj, dk);
    const float a = TrimBase(sim, tp.r);
    if (a <= 0.f) continue;
    const float mj = m[tok.i - j];
    const float d_weight = Dot<DV>(dh, saved.v_bar + (base + j) * dv, dv);  // ∂L/∂(α m)
    const float ds = d_weight * mj * a * two_over_r;
    sum_r += static_cast<double>(d_weight) * mj * 2.0 * a * (1.0 - sim) * inv_r2;
    sum_w += static_cast<double>(d_weight) * a * a * dm[tok.i - j];
    if (ds != 0.f) {
      if (rotate) d_rate += double(ds) * double(tok.i - j) * (double(q[0]) * kj[1] - double(q[1]) * kj[0]);
      #pragma unroll
      for (int x = 0; x < dk; ++x) dq[x] += ds * kj[x];
    }
  }
  // q̃_i is complete: MiPE (step 6) and unit normalization (step 5) backward.
  double c, sn;
  const double pos = double(s.pos0 + tok.i);
  MipeCosSin(tp.rate, pos, &c, &sn);
  FinishKeyOrQueryRowBackward<DK>(saved.q_tilde + idx * dk, saved.q_norm[idx], dq, rotate, c, sn, pos, s.rope_freq,
                                  dP + row * ldp + tok.t * C, dk);
  double* part = partial + idx * kParts;
  part[kPartR] = sum_r;
  part[kPartW] = sum_w;
  part[kPartRate] = d_rate;
}

// Backward, key pass: key j gathers ∂L/∂k̃_j and ∂L/∂v̄_j from its queries
// i = j … j + keys − 1 in ascending order, then finishes both into dP (MiPE and the
// unit norm for k̃, the unit norm for v̄). (∂L/∂rate is the query pass's, every pair's.)
template <int DK, int DV>
__global__ void KeyBackwardKernel(Dims s, const ScreeningTileParams* params, const float* mask,
                                  ScreeningSaved<float> saved, const float* dh, float* dP, double* partial) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= s.batch * s.tiles * s.seq) return;
  const Token tok(idx, s);  // tok.i is the key position j here
  const int dk = DK > 0 ? DK : s.dk, dv = DV > 0 ? DV : s.dv;
  const ScreeningTileParams tp = params[tok.t];
  const int64_t C = s.p_cols(), ldp = s.tiles * C;
  const float* m = mask + tok.t * s.mask_ld;
  // v̄_j is read where it is used rather than held: with k̃, ∂k̃ and ∂v̄ in registers a
  // copy of it made the d_K = 16, d_V = 64 instance spill at 255 registers on sm_90
  // (ptxas; tools/ptxas_usage.py).
  float k[DK > 0 ? DK : kMaxDk], dkey[DK > 0 ? DK : kMaxDk], dval[DV > 0 ? DV : kMaxDv];
  const float* v = saved.v_bar + idx * dv;
  #pragma unroll
  for (int x = 0; x < dk; ++x) {
    k[x] = saved.k_tilde[idx * dk + x];
    dkey[x] = 0.f;
  }
  #pragma unroll
  for (int x = 0; x < dv; ++x) dval[x] = 0.f;
  const float two_over_r = 2.f / tp.r;
  const int64_t base = tok.bt * s.seq, j = tok.i;
  const int64_t i1 = j + tp.keys - 1 < s.seq - 1 ? j + tp.keys - 1 : s.seq - 1;
  for (int64_t i = j; i <= i1; ++i) {
    const float* qi = saved.q_tilde + (base + i) * dk;
    const float a = TrimBase(Dot<DK>(qi, k, dk), tp.r);
    if (a <= 0.f) continue;
    const float mj = m[i - j];
    const float* dhi = dh + (base + i) * dv;
    const float weight = a * a * mj;
    if (weight != 0.f) {
      #pragma unroll
      for (int x = 0; x < dv; ++x) dval[x] += weight * dhi[x];
    }
    const float d_weight = Dot<DV>(dhi, v, dv);
    const float ds = d_weight * mj * a * two_over_r;
    if (ds != 0.f) {
      #pragma unroll
      for (int x = 0; x < dk; ++x) dkey[x] += ds * qi[x];
    }
  }
  double c, sn;
  const double pos = double(s.pos0 + j);
  MipeCosSin(tp.rate, pos, &c, &sn);
  float* dPj = dP + (tok.b * s.seq + j) * ldp + tok.t * C;
  FinishKeyOrQueryRowBackward<DK>(saved.k_tilde + idx * dk, saved.k_norm[idx], dkey, tp.rate != 0, c, sn, pos,
                                  s.rope_freq, dPj + dk, dk);
  NormalizeRotateBackwardRow<DV>(saved.v_bar + idx * dv, saved.v_norm[idx], dval, false, 1, 0, dPj + 2 * dk, dv);
}

// Backward of steps 6 and 5 for a window pass that left complete ∂L/∂q̃, ∂L/∂k̃, ∂L/∂v̄
// in d_q, d_k, d_v (ScreeningBackwardFinish): the query and key passes' own finish,
// row by row, into dP's q, k and v columns. ∂L/∂rate is the window pass's, summed pair
// by pair (screening.h).
template <int DK, int DV>
__global__ void NormalizeBackwardKernel(Dims s, const ScreeningTileParams* params, ScreeningSaved<float> saved,
                                        const float* d_q, const float* d_k, const float* d_v, float* dP) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= s.batch * s.tiles * s.seq) return;
  const Token tok(idx, s);
  const int dk = DK > 0 ? DK : s.dk, dv = DV > 0 ? DV : s.dv;
  const ScreeningTileParams tp = params[tok.t];
  const int64_t C = s.p_cols();
  float* dPi = dP + (tok.b * s.seq + tok.i) * s.tiles * C + tok.t * C;
  double c, sn;
  const double pos = double(s.pos0 + tok.i);
  MipeCosSin(tp.rate, pos, &c, &sn);
  float dz[DV > 0 ? (DV > DK ? DV : DK) : kMaxDv];  // overwritten by the row backward
  #pragma unroll
  for (int x = 0; x < dk; ++x) dz[x] = d_q[idx * dk + x];
  FinishKeyOrQueryRowBackward<DK>(saved.q_tilde + idx * dk, saved.q_norm[idx], dz, tp.rate != 0, c, sn, pos,
                                  s.rope_freq, dPi, dk);
  #pragma unroll
  for (int x = 0; x < dk; ++x) dz[x] = d_k[idx * dk + x];
  FinishKeyOrQueryRowBackward<DK>(saved.k_tilde + idx * dk, saved.k_norm[idx], dz, tp.rate != 0, c, sn, pos,
                                  s.rope_freq, dPi + dk, dk);
  #pragma unroll
  for (int x = 0; x < dv; ++x) dz[x] = d_v[idx * dv + x];
  NormalizeRotateBackwardRow<DV>(saved.v_bar + idx * dv, saved.v_norm[idx], dz, false, 1, 0, dPi + 2 * dk, dv);
}

// sums[bt, part] = Σ_i partial[bt, i, part]: one block per (b, tile), strided per-thread
// sums in order, then a tree; the same order on every run.
__global__ void ReducePartsKernel(const double* partial, int64_t seq, double* sums) {
  __shared__ double tree[kParts][kBlock];
  const double* p = partial + int64_t(blockIdx.x) * seq * kParts;
  for (int part = 0; part < kParts; ++part) {
    double sum = 0;
    for (int64_t i = threadIdx.x; i < seq; i += kBlock) sum += p[i * kParts + part];
    tree[part][threadIdx.x] = sum;
  }
  __syncthreads();
  for (int half = kBlock / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      for (int part = 0; part < kParts; ++part) tree[part][threadIdx.x] += tree[part][threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x < kParts) sums[int64_t(blockIdx.x) * kParts + threadIdx.x] = tree[threadIdx.x][0];
}

// g_sw[t] += ∂L/∂s_w, g_sr[t] += ∂L/∂s_r, g_so[t] += ∂L/∂s_O (g_so may be null) from
// sums [batch, tiles, kParts] and chain [tiles, kChain], one thread per tile: the sums over
// the batch in order b = 0, 1, … and TileScalarParamGrads's chain rule, the operations of
// ReduceTileScalarGrads's host loop and of that function one for one (__dadd_rn and
// __dmul_rn: no contraction into FMAs), so the gradients are the host's bit for bit.
__global__ void TileScalarParamGradsKernel(const double* sums, const double* chain, int64_t batch, int64_t tiles,
                                           float* g_sw, float* g_sr, float* g_so) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= tiles) return;
  const double* c = chain + t * kChain;
  double gw = 0, gr = 0, gs = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const double* sum = sums + (b * tiles + t) * kParts;
    gw = __dadd_rn(gw, __dadd_rn(sum[kPartW], __dmul_rn(sum[kPartRate], c[kChainRateDw])));
    gr = __dadd_rn(gr, sum[kPartR]);
    gs = __dadd_rn(gs, sum[kPartScale]);
  }
  g_sw[t] += c[kChainInfiniteW] != 0 ? 0.f : static_cast<float>(__dmul_rn(gw, c[kChainWMinus1]));
  g_sr[t] += static_cast<float>(__dmul_rn(__dmul_rn(gr, c[kChainR]), c[kChainOneMinusR]));
  if (g_so != nullptr) g_so[t] += static_cast<float>(__dmul_rn(gs, c[kChainScale]));
}

// The kernels' sizes, with the tables Prepare pointed `scratch` at.
Dims DimsOf(const ScreeningShape& shape, const ScreeningScratch& scratch) {
  const bool rope = shape.position == PositionKind::kRope;
  const ScreeningTables& t = *scratch.current;
  return Dims{shape.batch,        shape.seq, shape.tiles, shape.pos0, t.mask_ld, static_cast<int>(shape.d_k),
              static_cast<int>(shape.d_v), shape.tanh_norm, rope, shape.output_gate,
              rope ? t.rope_freq : nullptr};
}

// Checks the shape and points scratch->current at the per-tile tables (filled,
// screening_tables.h, and uploaded only when the cache has none of this content,
// screening_table_cache.h); returns the kernels' sizes.
Dims Prepare(const char* op, const ScreeningShape& shape, const TileScalars* tiles, ScreeningScratch* scratch,
             cudaStream_t stream) {
  if (shape.d_k < 2 || shape.d_k > kMaxDk || shape.d_v < 1 || shape.d_v > kMaxDv) {
    const std::string message = absl::StrCat("d_k = ", shape.d_k, ", d_v = ", shape.d_v,
                                              " is outside what the CUDA screening kernels take (2 <= d_k <= ", kMaxDk,
                                              ", 1 <= d_v <= ", kMaxDv, ")");
    FatalCudaError(op, message.c_str());
  }
  scratch->current = &scratch->tables.Get(op, shape, tiles, stream);
  return DimsOf(shape, *scratch);
}

unsigned Blocks(const Dims& s) { return static_cast<unsigned>((s.batch * s.tiles * s.seq + kBlock - 1) / kBlock); }

template <int DK, int DV>
void LaunchNormalize(const Dims& s, const float* P, const ScreeningScratch& scratch, const ScreeningSaved<float>& saved,
                     cudaStream_t stream) {
  Launch<NormalizeKernel<DK, DV>>(Blocks(s), kBlock, 0, stream, s, P, scratch.current->params, saved);
  MS_CUDA_CHECK_LAUNCH("ScreeningForward");
}

template <int DK, int DV>
void LaunchForward(const Dims& s, const float* P, const ScreeningScratch& scratch, const ScreeningSaved<float>& saved,
                   float* U, cudaStream_t stream) {
  LaunchNormalize<DK, DV>(s, P, scratch, saved, stream);
  Launch<AggregateKernel<DK, DV>>(Blocks(s), kBlock, 0, stream, s, P, scratch.current->params, scratch.current->mask, saved,
                                  U);
  MS_CUDA_CHECK_LAUNCH("ScreeningForward");
}

template <int DK, int DV>
void LaunchOutputBackward(const Dims& s, const float* P, const float* dU, ScreeningScratch& scratch,
                          const ScreeningSaved<float>& saved, float* dP, cudaStream_t stream) {
  Launch<OutputBackwardKernel<DK, DV>>(Blocks(s), kBlock, 0, stream, s, P, dU, scratch.current->params, saved, dP,
                                       scratch.dh.data(), scratch.partial.data());
  MS_CUDA_CHECK_LAUNCH("ScreeningBackward");
}

template <int DK, int DV>
void LaunchWindowBackward(const Dims& s, ScreeningScratch& scratch, const ScreeningSaved<float>& saved, float* dP,
                          cudaStream_t stream) {
  Launch<QueryBackwardKernel<DK, DV>>(Blocks(s), kBlock, 0, stream, s, scratch.current->params, scratch.current->mask,
                                      scratch.current->dmask, saved, scratch.dh.data(), dP, scratch.partial.data());
  MS_CUDA_CHECK_LAUNCH("ScreeningBackward");
  Launch<KeyBackwardKernel<DK, DV>>(Blocks(s), kBlock, 0, stream, s, scratch.current->params, scratch.current->mask, saved,
                                    scratch.dh.data(), dP, scratch.partial.data());
  MS_CUDA_CHECK_LAUNCH("ScreeningBackward");
}

template <int DK, int DV>
void LaunchNormalizeBackward(const Dims& s, ScreeningScratch& scratch, const ScreeningSaved<float>& saved, float* dP,
                             cudaStream_t stream) {
  Launch<NormalizeBackwardKernel<DK, DV>>(Blocks(s), kBlock, 0, stream, s, scratch.current->params, saved,
                                          scratch.d_q.data(), scratch.d_k.data(), scratch.d_v.data(), dP);
  MS_CUDA_CHECK_LAUNCH("ScreeningBackward");
}

bool FixedWidths(const Dims& s) { return s.dk == 16 && s.dv == 64; }

// The reduction of scratch->partial into grads: per (b, tile) on the device in a fixed
// order, then over the batch in order, as the CPU's task sums: on the host (=, waits),
// or on the device into the learned scalars' gradients (+=, TileScalarGradsOut).
void ReduceTileScalarGrads(const ScreeningShape& shape, TileScalarGradsOut out, ScreeningScratch* scratch,
                           cudaStream_t stream) {
  const char* op = "ScreeningBackward";
  const int64_t nt = shape.tiles, tasks = shape.batch * nt;
  Launch<ReducePartsKernel>(static_cast<unsigned>(tasks), kBlock, 0, stream,
                            scratch->partial.data(), shape.seq, scratch->sums.data());
  MS_CUDA_CHECK_LAUNCH(op);
  if (out.grads == nullptr) {
    Launch<TileScalarParamGradsKernel>(static_cast<unsigned>((nt + kBlock - 1) / kBlock), kBlock, 0, stream,
                                       scratch->sums.data(), scratch->current->chain, shape.batch, nt, out.g_sw,
                                       out.g_sr, out.g_so);
    MS_CUDA_CHECK_LAUNCH(op);
    return;
  }
  TileScalarGrads* grads = out.grads;
  scratch->host_sums.resize(tasks * kParts);
  MS_CUDA_CHECK(op, cudaMemcpyAsync(scratch->host_sums.data(), scratch->sums.data(), tasks * kParts * sizeof(double),
                                    cudaMemcpyDeviceToHost, stream));
  MS_CUDA_CHECK(op, cudaStreamSynchronize(stream));
  for (int64_t t = 0; t < nt; ++t) {
    for (int64_t b = 0; b < shape.batch; ++b) {
      const double* sum = scratch->host_sums.data() + (b * nt + t) * kParts;
      grads[t].w += sum[kPartW] + sum[kPartRate] * scratch->current->rate_dw[t];
      grads[t].r += sum[kPartR];
      grads[t].scale += sum[kPartScale];
    }
  }
}

}  // namespace

void ScreeningForward(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                      const ScreeningSaved<float>& saved, float* U, ScreeningScratch* scratch, cudaStream_t stream) {
  if (shape.batch <= 0 || shape.seq <= 0 || shape.tiles <= 0) return;
  const Dims s = Prepare("ScreeningForward", shape, tiles, scratch, stream);
  if (FixedWidths(s)) {
    LaunchForward<16, 64>(s, P, *scratch, saved, U, stream);
  } else {
    LaunchForward<0, 0>(s, P, *scratch, saved, U, stream);
  }
}

void ScreeningNormalize(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                        const ScreeningSaved<float>& saved, ScreeningScratch* scratch, cudaStream_t stream) {
  if (shape.batch <= 0 || shape.seq <= 0 || shape.tiles <= 0) return;
  const Dims s = Prepare("ScreeningForward", shape, tiles, scratch, stream);
  if (FixedWidths(s)) {
    LaunchNormalize<16, 64>(s, P, *scratch, saved, stream);
  } else {
    LaunchNormalize<0, 0>(s, P, *scratch, saved, stream);
  }
}

void ScreeningUploadTables(const ScreeningShape& shape, const TileScalars* tiles, ScreeningScratch* scratch,
                           cudaStream_t stream) {
  if (shape.batch <= 0 || shape.seq <= 0 || shape.tiles <= 0) return;
  Prepare("ScreeningForward", shape, tiles, scratch, stream);
}

bool ScreeningBackwardPrepare(const ScreeningShape& shape, const TileScalars* tiles, TileScalarGradsOut grads,
                              ScreeningScratch* scratch, cudaStream_t stream) {
  const int64_t nt = shape.tiles;
  if (grads.grads != nullptr) {
    for (int64_t t = 0; t < nt; ++t) grads.grads[t] = TileScalarGrads{};
  }
  if (shape.batch <= 0 || shape.seq <= 0 || nt <= 0) return false;
  Prepare("ScreeningBackward", shape, tiles, scratch, stream);
  const int64_t tasks = shape.batch * nt, tokens = tasks * shape.seq;
  scratch->dh.Resize(tokens * shape.d_v);
  scratch->partial.Resize(tokens * kParts);
  scratch->sums.Resize(tasks * kParts);
  return true;
}

bool ScreeningBackwardBegin(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                            const ScreeningSaved<float>& saved, const float* dU, float* dP, TileScalarGradsOut grads,
                            ScreeningScratch* scratch, cudaStream_t stream) {
  if (!ScreeningBackwardPrepare(shape, tiles, grads, scratch, stream)) return false;
  const Dims s = DimsOf(shape, *scratch);
  if (FixedWidths(s)) {
    LaunchOutputBackward<16, 64>(s, P, dU, *scratch, saved, dP, stream);
  } else {
    LaunchOutputBackward<0, 0>(s, P, dU, *scratch, saved, dP, stream);
  }
  return true;
}

void ScreeningBackwardFinish(const ScreeningShape& shape, const ScreeningSaved<float>& saved, float* dP,
                             TileScalarGradsOut grads, ScreeningScratch* scratch, cudaStream_t stream) {
  const Dims s = DimsOf(shape, *scratch);
  if (FixedWidths(s)) {
    LaunchNormalizeBackward<16, 64>(s, *scratch, saved, dP, stream);
  } else {
    LaunchNormalizeBackward<0, 0>(s, *scratch, saved, dP, stream);
  }
  ReduceTileScalarGrads(shape, grads, scratch, stream);
}

void ScreeningBackwardReduce(const ScreeningShape& shape, TileScalarGradsOut grads, ScreeningScratch* scratch,
                             cudaStream_t stream) {
  ReduceTileScalarGrads(shape, grads, scratch, stream);
}

void ScreeningBackward(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                       const ScreeningSaved<float>& saved, const float* dU, float* dP, TileScalarGradsOut grads,
                       ScreeningScratch* scratch, cudaStream_t stream) {
  if (!ScreeningBackwardBegin(shape, P, tiles, saved, dU, dP, grads, scratch, stream)) return;
  const Dims s = DimsOf(shape, *scratch);
  if (FixedWidths(s)) {
    LaunchWindowBackward<16, 64>(s, *scratch, saved, dP, stream);
  } else {
    LaunchWindowBackward<0, 0>(s, *scratch, saved, dP, stream);
  }
  ReduceTileScalarGrads(shape, grads, scratch, stream);
}

}  // namespace multiscreen::kernels::cuda
