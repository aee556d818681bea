#include "kernels/cpu/screening.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/gate.h"
#include "kernels/cpu/mipe.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/softmask.h"
#include "kernels/cpu/tanh_norm.h"
#include "kernels/cpu/unit_rows.h"

namespace multiscreen::kernels::cpu {
namespace {

template <typename Real>
inline Real Dot(const Real* a, const Real* b, int64_t n) {
  Real s = 0;
  for (int64_t c = 0; c < n; ++c) s += a[c] * b[c];
  return s;
}

template <typename Real>
inline void Axpy(Real alpha, const Real* x, Real* y, int64_t n) {
  for (int64_t c = 0; c < n; ++c) y[c] += alpha * x[c];
}

// Trim (spec step 8): α = a², a = 1 − (1 − s)/r; the pair is rejected when a ≤ 0.
template <typename Real>
MS_ALWAYS_INLINE Real TrimBase(Real s, Real r) {
  return Real(1) - (Real(1) - s) / r;
}

template <typename Real>
using Thread = typename ScreeningWorkspace<Real>::Thread;

// What every task of one call reads (and where it writes).
template <typename Real>
struct Call {
  const ScreeningShape& shape;
  const Real* P;
  const TileScalars* tiles;
  const ScreeningSaved<Real>& saved;
  const ScreeningWorkspace<Real>& ws;
  Real* U = nullptr;          // forward
  const Real* dU = nullptr;   // backward
  Real* dP = nullptr;         // backward
};

// ---- row helpers (D > 0: the width as a compile-time constant; 0: d_rt) ----------

// Spec step 6 on one row: coordinates (0, 1) rotated by φ (cos φ = c, sin φ = s), in fp64.
template <typename Real>
MS_ALWAYS_INLINE void RotateRow(Real* z, double c, double s) {
  const double z0 = z[0], z1 = z[1];
  z[0] = static_cast<Real>(z0 * c - z1 * s);
  z[1] = static_cast<Real>(z0 * s + z1 * c);
}

// Backward of UnitRow (unit_rows.h) then RotateRow for one row of q̃ or k̃ (or of
// v̄ with rotate = false): dz (∂L/∂z̃, overwritten) to dx = ∂L/∂x. The row's part of
// ∂L/∂rate is not formed here: the window loop sums ∂L/∂rate pair by pair (see Run).
template <typename Real, int D>
MS_ALWAYS_INLINE void NormalizeRotateBackwardRow(const Real* z, Real norm, Real* dz, bool rotate, double c, double s,
                                                 Real* dx, int64_t d_rt) {
  const int64_t d = D > 0 ? D : d_rt;
  Real y0 = z[0], y1 = d > 1 ? z[1] : Real(0);
  if (rotate) {
    const double g0 = dz[0], g1 = dz[1];
    dz[0] = static_cast<Real>(g0 * c + g1 * s);
    dz[1] = static_cast<Real>(-g0 * s + g1 * c);
    y0 = static_cast<Real>(double(z[0]) * c + double(z[1]) * s);  // z̄ = R(−φ) z̃
    y1 = static_cast<Real>(-double(z[0]) * s + double(z[1]) * c);
  }
  const bool clamped = !(norm > Real(kUnitNormFloor));
  const Real inv = Real(1) / (clamped ? Real(kUnitNormFloor) : norm);
  Real dot = 0;
  if (!clamped) {
    dot = y0 * dz[0] + (d > 1 ? y1 * dz[1] : Real(0));
#pragma omp simd reduction(+ : dot)
    for (int64_t i = 2; i < d; ++i) dot += z[i] * dz[i];
  }
  dx[0] = (dz[0] - y0 * dot) * inv;
  if (d > 1) dx[1] = (dz[1] - y1 * dot) * inv;
#pragma omp simd
  for (int64_t i = 2; i < d; ++i) dx[i] = (dz[i] - z[i] * dot) * inv;
}

// s[jj] = q · k̃_{j0+jj} for jj < n, from k̃ transposed (k_t[c·ld + j]), summed over
// c in order. With d_k fixed, a vector register of keys at a time; the
// last block runs past n (into columns of k_t that hold zeros or older keys, and
// entries of s that nobody reads), which TransposedStride and kSimilarityPad allow.
template <typename Target, typename Real, int DK>
MS_ALWAYS_INLINE void Similarities(const Real* q, const Real* k_t, int64_t ld, int64_t n, int64_t dk_rt, Real* s) {
  int64_t jj = 0;
  if constexpr (DK > 0) {
    using V = Vec<Target, Real>;
    constexpr int64_t L = sizeof(V) / sizeof(Real);
    for (; jj < n; jj += L) {
      V acc = {};
      for (int c = 0; c < DK; ++c) {
        V k;
        std::memcpy(&k, k_t + c * ld + jj, sizeof(V));
        acc += q[c] * k;
      }
      std::memcpy(s + jj, &acc, sizeof(V));
    }
  }
  const int64_t dk = DK > 0 ? DK : dk_rt;
  for (; jj < n; ++jj) {
    Real acc = 0;
    for (int64_t c = 0; c < dk; ++c) acc += q[c] * k_t[c * ld + jj];
    s[jj] = acc;
  }
}

// A row of D values held in vector registers across a loop (D fixed, a whole number
// of the Target's vectors), so that a sum over keys does not go through memory each step.
template <typename Target, typename Real, int D>
struct VecRow {
  using V = Vec<Target, Real>;
  static constexpr int kL = sizeof(V) / sizeof(Real), kN = D / kL;
  static_assert(D % kL == 0);
  V v[kN];
  MS_ALWAYS_INLINE void Zero() {
    for (int u = 0; u < kN; ++u) v[u] = V{};
  }
  MS_ALWAYS_INLINE void Load(const Real* x) {
    for (int u = 0; u < kN; ++u) std::memcpy(&v[u], x + u * kL, sizeof(V));
  }
  MS_ALWAYS_INLINE void Store(Real* x) const {
    for (int u = 0; u < kN; ++u) std::memcpy(x + u * kL, &v[u], sizeof(V));
  }
  MS_ALWAYS_INLINE void AddScaled(Real a, const Real* x) {  // this += a · x
    for (int u = 0; u < kN; ++u) {
      V t;
      std::memcpy(&t, x + u * kL, sizeof(V));
      v[u] += a * t;
    }
  }
  MS_ALWAYS_INLINE Real Dot(const Real* x) const {
    V sum = {};
    for (int u = 0; u < kN; ++u) {
      V t;
      std::memcpy(&t, x + u * kL, sizeof(V));
      sum += v[u] * t;
    }
    return HorizontalSum<Target, Real>(sum);
  }
};

// Offsets jj < n where keep(x[jj]), in order; returns how many. 32 at a time: one
// vector compare makes a bit mask, and only its set bits cost a step.
template <typename Real, typename Keep>
MS_ALWAYS_INLINE int32_t Compact(const Real* x, int64_t n, Keep keep, int32_t* out) {
  int32_t count = 0;
  for (int64_t jb = 0; jb < n; jb += 32) {
    uint32_t bits = 0;
    if (n - jb >= 32) {
#pragma omp simd reduction(| : bits)
      for (int l = 0; l < 32; ++l) bits |= uint32_t(keep(x[jb + l]) ? 1 : 0) << l;
    } else {
      for (int l = 0; l < n - jb; ++l) bits |= uint32_t(keep(x[jb + l]) ? 1 : 0) << l;
    }
    while (bits != 0) {
      out[count++] = static_cast<int32_t>(jb + __builtin_ctz(bits));
      bits &= bits - 1;
    }
  }
  return count;
}

// Similarities writes up to this many entries of s past n (a 64-byte vector of fp32).
constexpr int64_t kSimilarityPad = 16;

// Row stride of the transposed keys: at least T, and an odd number of 64-byte lines,
// so that the d_k rows a query's window reads fall in different L1 sets (a stride
// of a multiple of 4 KiB would put all 16 in one set and thrash it).
template <typename Real>
int64_t TransposedStride(int64_t T) {
  constexpr int64_t line = 64 / sizeof(Real);
  int64_t lines = (T + line + line - 1) / line;  // room for Similarities' last block
  if (lines % 2 == 0) ++lines;
  return lines * line;
}

// Slots of the backward's ring of key gradients: a power of two ≥ keys.
inline int64_t RingSlots(int64_t keys) {
  int64_t slots = 1;
  while (slots < keys) slots *= 2;
  return slots;
}

// ---- one (sequence, tile) task ----------------------------------------------------
// One pass over the tokens: token i is normalized (and becomes key i), then queries
// its window, then produces its output, while its rows are in cache.

// Asks for the next token's row of a strided matrix (the prefetchers do not follow
// strides of kilobytes well).
constexpr int64_t kAhead = 2;  // tokens ahead

template <typename Real>
MS_ALWAYS_INLINE void PrefetchRow(const Real* row, int64_t n) {
  for (int64_t c = 0; c < n; c += 64 / sizeof(Real)) __builtin_prefetch(row + c);
}
template <typename Real>
MS_ALWAYS_INLINE void PrefetchRowForWrite(Real* row, int64_t n) {
  for (int64_t c = 0; c < n; c += 64 / sizeof(Real)) __builtin_prefetch(row + c, 1);
}

template <typename Real, int DK, int DV>
struct ForwardTask {
  template <typename Target>
  MS_ALWAYS_INLINE static void Run(const Call<Real>& call, int64_t task, Thread<Real>& th) {
    const ScreeningShape& shape = call.shape;
    const ScreeningWorkspace<Real>& ws = call.ws;
    const int64_t T = shape.seq, nt = shape.tiles, b = task / nt, t = task % nt;
    const int64_t dk = DK > 0 ? DK : shape.d_k, dv = DV > 0 ? DV : shape.d_v;
    const int64_t C = shape.p_cols(), ldp = nt * C, ldu = nt * dv;
    const Real* Pb = call.P + b * T * ldp + t * C;
    Real* qt = call.saved.q_tilde + task * T * dk;
    Real* kt = call.saved.k_tilde + task * T * dk;
    Real* vb = call.saved.v_bar + task * T * dv;
    Real* qn = call.saved.q_norm + task * T;
    Real* kn = call.saved.k_norm + task * T;
    Real* vn = call.saved.v_norm + task * T;
    Real* h = call.saved.h + task * T * dv;
    // ĝ and dĝ/dg per token for the backward ([T, 2·d_v]), when the caller keeps them.
    Real* gate_saved = call.saved.gate != nullptr && shape.output_gate ? call.saved.gate + task * T * 2 * dv : nullptr;
    const bool rotate = ws.rate[t] != 0;
    const double* rot = ws.rotation.data() + t * T * 2;
    const double* rope = shape.position == PositionKind::kRope ? ws.rope.data() : nullptr;
    const int64_t keys = ws.keys[t];
    const Real* mask = ws.mask.data() + t * ws.mask_ld;
    const Real r = static_cast<Real>(call.tiles[t].r), scale = static_cast<Real>(call.tiles[t].scale);
    Real* k_t = th.k_t.data();
    const int64_t ld_t = TransposedStride<Real>(T);
    Real *s = th.s.data(), *weight = th.weight.data();
    int32_t* accepted = th.accepted.data();
    Real h_fixed[DV > 0 ? DV : 1];
    Real* hi = DV > 0 ? h_fixed : th.row.data();
    for (int64_t i = 0; i < T; ++i) {
      const Real* row = Pb + i * ldp;
      if (i + kAhead < T) {
        PrefetchRow(row + kAhead * ldp, C);
        PrefetchRowForWrite(call.U + (b * T + i + kAhead) * ldu + t * dv, dv);
      }
      // Steps 5–6: unit rows; MiPE on q̃ and k̃; k̃_i joins the transposed keys.
      qn[i] = UnitRow<Real, DK>(row, qt + i * dk, dk);
      kn[i] = UnitRow<Real, DK>(row + dk, kt + i * dk, dk);
      vn[i] = UnitRow<Real, DV>(row + 2 * dk, vb + i * dv, dv);
      if (rotate) {
        RotateRow(qt + i * dk, rot[2 * i], rot[2 * i + 1]);
        RotateRow(kt + i * dk, rot[2 * i], rot[2 * i + 1]);
      } else if (rope != nullptr) {  // position ROPE: every pair turns
        RopeRotateRows(qt + i * dk, dk, 1, dk, rope + i * dk);
        RopeRotateRows(kt + i * dk, dk, 1, dk, rope + i * dk);
      }
      for (int64_t c = 0; c < dk; ++c) k_t[c * ld_t + i] = kt[i * dk + c];
      // Steps 7–10 over the window [j0, i].
      const int64_t j0 = std::max<int64_t>(0, i - keys + 1), n = i - j0 + 1;
      const Real* m = mask + (keys - 1 - (i - j0));  // m[jj] = m(i − j0 − jj)
      Similarities<Target, Real, DK>(qt + i * dk, k_t + j0, ld_t, n, dk, s);
#pragma omp simd
      for (int64_t jj = 0; jj < n; ++jj) {
        const Real a = TrimBase(s[jj], r);
        weight[jj] = a <= 0 ? Real(0) : a * a * m[jj];  // NaN stays NaN
      }
      const int32_t count = Compact(weight, n, [](Real x) { return x != 0; }, accepted);
      if constexpr (DV > 0) {
        VecRow<Target, Real, DV> acc;
        acc.Zero();
        for (int32_t e = 0; e < count; ++e) acc.AddScaled(weight[accepted[e]], vb + (j0 + accepted[e]) * DV);
        acc.Store(hi);
      } else {
        std::fill(hi, hi + dv, Real(0));
        for (int32_t e = 0; e < count; ++e) {
          const Real wj = weight[accepted[e]];
          const Real* vj = vb + (j0 + accepted[e]) * dv;
#pragma omp simd
          for (int64_t c = 0; c < dv; ++c) hi[c] += wj * vj[c];
        }
      }
      // Steps 11–13.
      Real sq = 0;
#pragma omp simd reduction(+ : sq)
      for (int64_t c = 0; c < dv; ++c) sq += hi[c] * hi[c];
      Real f = 1, unused;
      if (shape.tanh_norm) TanhNormScale(std::sqrt(sq), &f, &unused);
      Real* out = call.U + (b * T + i) * ldu + t * dv;
      Real* h_out = h + i * dv;
      if (shape.output_gate && gate_saved != nullptr) {
        // The gate and its derivative once, kept for the backward (one exp and one tanh
        // either way; the derivative is a few products more).
        const Real* g = row + 2 * dk + dv;
        Real* gate = gate_saved + i * 2 * dv;
        Real* gate_dg = gate + dv;
#pragma omp simd
        for (int64_t c = 0; c < dv; ++c) {
          Real gc, dgc;
          GateForwardAndDerivative(g[c], &gc, &dgc);
          gate[c] = gc;
          gate_dg[c] = dgc;
          h_out[c] = hi[c];
          out[c] = scale * hi[c] * f * gc;
        }
      } else if (shape.output_gate) {
        const Real* g = row + 2 * dk + dv;
#pragma omp simd
        for (int64_t c = 0; c < dv; ++c) {
          h_out[c] = hi[c];
          out[c] = scale * hi[c] * f * GateForward(g[c]);
        }
      } else {  // output_gate off (issue 30): no gate columns, u = scale · TanhNorm(h)
#pragma omp simd
        for (int64_t c = 0; c < dv; ++c) {
          h_out[c] = hi[c];
          out[c] = scale * hi[c] * f;
        }
      }
    }
  }
};

// The backward, one pass as well: query i's output, gate and TanhNorm backward give
// ∂L/∂h_i, its window's pairs are recomputed, and q̃_i is finished at once; key j
// collects from queries j … j + keys − 1 in a ring of key slots and is finished as
// soon as the last of them is done.
template <typename Real, int DK, int DV>
struct BackwardTask {
  template <typename Target>
  MS_ALWAYS_INLINE static void Run(const Call<Real>& call, int64_t task, Thread<Real>& th, TileScalarGrads* grads) {
    const ScreeningShape& shape = call.shape;
    const ScreeningWorkspace<Real>& ws = call.ws;
    const int64_t T = shape.seq, nt = shape.tiles, b = task / nt, t = task % nt;
    const int64_t dk = DK > 0 ? DK : shape.d_k, dv = DV > 0 ? DV : shape.d_v;
    const int64_t C = shape.p_cols(), ldp = nt * C, ldu = nt * dv;
    const Real* Pb = call.P + b * T * ldp + t * C;
    Real* dPb = call.dP + b * T * ldp + t * C;
    const Real* qt = call.saved.q_tilde + task * T * dk;
    const Real* kt = call.saved.k_tilde + task * T * dk;
    const Real* vb = call.saved.v_bar + task * T * dv;
    const Real* qn = call.saved.q_norm + task * T;
    const Real* kn = call.saved.k_norm + task * T;
    const Real* vn = call.saved.v_norm + task * T;
    const Real* h = call.saved.h + task * T * dv;
    // The forward's ĝ and dĝ/dg ([T, 2·d_v]), or null: computed here from g.
    const Real* gate_saved =
        call.saved.gate != nullptr && shape.output_gate ? call.saved.gate + task * T * 2 * dv : nullptr;
    const bool rotate = ws.rate[t] != 0;
    const double* rot = ws.rotation.data() + t * T * 2;
    const double* rope = shape.position == PositionKind::kRope ? ws.rope.data() : nullptr;
    const int64_t keys = ws.keys[t];
    const Real* mask = ws.mask.data() + t * ws.mask_ld;
    const Real* dmask = ws.dmask.data() + t * ws.mask_ld;
    const Real r = static_cast<Real>(call.tiles[t].r), scale = static_cast<Real>(call.tiles[t].scale);

    Real* k_t = th.k_t.data();
    const int64_t ld_t = TransposedStride<Real>(T);
    const int64_t ring = RingSlots(keys), slot_mask = ring - 1;
    Real* dkey = th.dkey.data();  // [ring, d_k]: ∂L/∂k̃_j in slot j mod ring
    Real* dval = th.dval.data();  // [ring, d_v]: ∂L/∂v̄_j
    std::fill(dkey, dkey + ring * dk, Real(0));
    std::fill(dval, dval + ring * dv, Real(0));
    Real *s = th.s.data(), *trim = th.weight.data();
    int32_t* accepted = th.accepted.data();
    Real dh_fixed[DV > 0 ? DV : 1], dtn_fixed[DV > 0 ? DV : 1], dq_fixed[DK > 0 ? DK : 1];
    Real gate_fixed[DV > 0 ? DV : 1], gate_dg_fixed[DV > 0 ? DV : 1];
    Real* dh = DV > 0 ? dh_fixed : th.row.data();
    Real* d_tn = DV > 0 ? dtn_fixed : th.row.data() + dv;
    Real* dq = DK > 0 ? dq_fixed : th.row.data() + 2 * dv;
    Real* gate = DV > 0 ? gate_fixed : th.row.data() + 2 * dv + dk;       // ĝ_i
    Real* gate_dg = DV > 0 ? gate_dg_fixed : th.row.data() + 3 * dv + dk;  // dĝ/dg at g_i

    // ∂L/∂rate (MiPE's angle φ_i = pos_i · rate) pair by pair: s_ij = q̃_i · k̃_j turns with
    // φ_i − φ_j, so ∂s_ij/∂rate = (i − j)(q̃_i[0] k̃_j[1] − q̃_i[1] k̃_j[0]), exact at any pos0.
    // (The per-row form Σ_i pos_i (q̃_i × ∂L/∂q̃_i) + Σ_j pos_j (k̃_j × ∂L/∂k̃_j) is equal in
    // exact arithmetic, but its halves grow with pos0 and cancel: in fp32 at pos0 = 70000
    // ∂L/∂w came out 1.4e-3 off fp64's; tests/kernels/screening_test.cc.)
    double d_scale = 0, sum_r = 0, sum_w = 0, d_rate = 0;
    // Key j is complete: MiPE and unit normalization backward of k̃_j and v̄_j into dP.
    auto finish_key = [&](int64_t j) {
      Real* dkj = dkey + (j & slot_mask) * dk;
      Real* dvj = dval + (j & slot_mask) * dv;
      NormalizeRotateBackwardRow<Real, DK>(kt + j * dk, kn[j], dkj, rotate, rot[2 * j], rot[2 * j + 1],
                                           dPb + j * ldp + dk, dk);
      // RoPE commutes with the unit-norm backward (a rotation keeps the dot product):
      // the rotated frame's ∂L/∂k turned back by Rᵀ.
      if (rope != nullptr) RopeRotateRows(dPb + j * ldp + dk, dk, 1, dk, rope + j * dk, /*inverse=*/true);
      NormalizeRotateBackwardRow<Real, DV>(vb + j * dv, vn[j], dvj, false, 1, 0, dPb + j * ldp + 2 * dk, dv);
      std::fill(dkj, dkj + dk, Real(0));
      std::fill(dvj, dvj + dv, Real(0));
    };
    for (int64_t i = 0; i < T; ++i) {
      if (i + kAhead < T) {
        const int64_t ia = i + kAhead;
        if (gate_saved != nullptr) {
          PrefetchRow(gate_saved + ia * 2 * dv, 2 * dv);
        } else if (shape.output_gate) {
          PrefetchRow(Pb + ia * ldp + 2 * dk + dv, dv);
        }
        PrefetchRow(call.dU + (b * T + ia) * ldu + t * dv, dv);
        PrefetchRow(h + ia * dv, dv);
        PrefetchRow(vb + ia * dv, dv);
        PrefetchRowForWrite(dPb + ia * ldp, dk);
        if (shape.output_gate) PrefetchRowForWrite(dPb + ia * ldp + 2 * dk + dv, dv);
        if (ia + 1 - keys >= 0) PrefetchRowForWrite(dPb + (ia + 1 - keys) * ldp + dk, dk + dv);
      }
      for (int64_t c = 0; c < dk; ++c) k_t[c * ld_t + i] = kt[i * dk + c];
      // Output scale and gate (steps 12–13), then TanhNorm (step 11): ∂L/∂h_i.
      const Real* hi = h + i * dv;
      const Real* dUi = call.dU + (b * T + i) * ldu + t * dv;
      Real sq = 0;
#pragma omp simd reduction(+ : sq)
      for (int64_t c = 0; c < dv; ++c) sq += hi[c] * hi[c];
      Real f_out = 1, f_dn_out = 0;  // identity when the switch is off: ∂L/∂h = ∂L/∂u
      if (shape.tanh_norm) TanhNormScale(std::sqrt(sq), &f_out, &f_dn_out);
      // Copies whose address is not taken: the loops below stay vectorized (with f itself
      // the compiler reloaded it after every store into dP and ran them one lane at a time).
      const Real f = f_out, f_dn = f_dn_out;
      double row_scale = 0;
      Real dot = 0;
      if (shape.output_gate) {
        Real* dg = dPb + i * ldp + 2 * dk + dv;
        const Real* gi = gate;  // ĝ_i
        const Real* gi_dg = gate_dg;  // dĝ/dg at g_i
        if (gate_saved != nullptr) {  // the forward's
          gi = gate_saved + i * 2 * dv;
          gi_dg = gi + dv;
        } else {
          const Real* g = Pb + i * ldp + 2 * dk + dv;
          // The gate alone in its own loop: with the fp64 sum below in the same loop the
          // compiler ran the exp and tanh one lane at a time (most of the backward's time).
#pragma omp simd
          for (int64_t c = 0; c < dv; ++c) GateForwardAndDerivative(g[c], &gate[c], &gate_dg[c]);
        }
#pragma omp simd reduction(+ : dot)
        for (int64_t c = 0; c < dv; ++c) {
          d_tn[c] = scale * dUi[c] * gi[c];
          dg[c] = scale * dUi[c] * (hi[c] * f) * gi_dg[c];
          dot += hi[c] * d_tn[c];
        }
        // The fp64 sum in a loop of its own.
#pragma omp simd reduction(+ : row_scale)
        for (int64_t c = 0; c < dv; ++c) row_scale += static_cast<double>(dUi[c]) * (hi[c] * f) * gi[c];
      } else {  // output_gate off: the gate is 1 and has no columns
#pragma omp simd reduction(+ : dot)
        for (int64_t c = 0; c < dv; ++c) {
          d_tn[c] = scale * dUi[c];
          dot += hi[c] * d_tn[c];
        }
#pragma omp simd reduction(+ : row_scale)
        for (int64_t c = 0; c < dv; ++c) row_scale += static_cast<double>(dUi[c]) * hi[c] * f;
      }
      d_scale += row_scale;
#pragma omp simd
      for (int64_t c = 0; c < dv; ++c) dh[c] = f * d_tn[c] + f_dn * dot * hi[c];

      // Aggregate, Trim, Softmask (steps 7–10), relevance recomputed.
      const int64_t j0 = std::max<int64_t>(0, i - keys + 1), n = i - j0 + 1;
      const Real* m = mask + (keys - 1 - (i - j0));
      const Real* dm = dmask + (keys - 1 - (i - j0));
      const Real* qi = qt + i * dk;
      Similarities<Target, Real, DK>(qi, k_t + j0, ld_t, n, dk, s);
#pragma omp simd
      for (int64_t jj = 0; jj < n; ++jj) trim[jj] = TrimBase(s[jj], r);
      const int32_t count = Compact(trim, n, [](Real a) { return !(a <= 0); }, accepted);
      constexpr bool kFixed = DK > 0 && DV > 0;
      const Real two_over_r = Real(2) / r;
      const double inv_r2 = 1.0 / (double(r) * r);
      // With fixed widths ∂L/∂h_i and ∂L/∂q̃_i stay in vector registers over the keys.
      VecRow<Target, Real, kFixed ? DV : kLanes<Target, Real>> dh_reg;
      VecRow<Target, Real, kFixed ? DK : kLanes<Target, Real>> dq_reg;
      if constexpr (kFixed) {
        dh_reg.Load(dh);
        dq_reg.Zero();
      } else {
        std::fill(dq, dq + dk, Real(0));
      }
      for (int32_t e = 0; e < count; ++e) {
        const int64_t jj = accepted[e], j = j0 + jj;
        const Real a = trim[jj], mj = m[jj];
        const Real* vj = vb + j * dv;
        Real d_weight = 0;  // ∂L/∂(α m)
        if constexpr (kFixed) {
          d_weight = dh_reg.Dot(vj);
        } else {
#pragma omp simd reduction(+ : d_weight)
          for (int64_t c = 0; c < dv; ++c) d_weight += dh[c] * vj[c];
        }
        const Real weight = a * a * mj;
        if (weight != 0) {
          Real* dvj = dval + (j & slot_mask) * dv;
#pragma omp simd
          for (int64_t c = 0; c < dv; ++c) dvj[c] += weight * dh[c];
        }
        const Real ds = d_weight * mj * a * two_over_r;
        sum_r += static_cast<double>(d_weight) * mj * 2.0 * a * (1.0 - s[jj]) * inv_r2;
        sum_w += static_cast<double>(d_weight) * a * a * dm[jj];
        if (ds != 0) {
          const Real* kj = kt + j * dk;
          if (rotate) d_rate += double(ds) * double(i - j) * (double(qi[0]) * kj[1] - double(qi[1]) * kj[0]);
          Real* dkj = dkey + (j & slot_mask) * dk;
          if constexpr (kFixed) dq_reg.AddScaled(ds, kj);
#pragma omp simd
          for (int64_t c = 0; c < dk; ++c) {
            if constexpr (!kFixed) dq[c] += ds * kj[c];
            dkj[c] += ds * qi[c];
          }
        }
      }
      if constexpr (kFixed) dq_reg.Store(dq);
      // q̃_i is complete: MiPE (step 6) and unit normalization (step 5) backward.
      NormalizeRotateBackwardRow<Real, DK>(qi, qn[i], dq, rotate, rot[2 * i], rot[2 * i + 1], dPb + i * ldp, dk);
      if (rope != nullptr) RopeRotateRows(dPb + i * ldp, dk, 1, dk, rope + i * dk, /*inverse=*/true);
      if (i - keys + 1 >= 0) finish_key(i - keys + 1);
    }
    for (int64_t j = std::max<int64_t>(0, T - keys + 1); j < T; ++j) finish_key(j);
    grads->scale = d_scale;
    grads->r = sum_r;
    grads->w = sum_w + d_rate * ws.rate_dw[t];
  }
};

// ---- the call: tables, scratch, tasks ---------------------------------------------

// Sizes the workspace for this call and fills the per-tile scalars (serial, cheap).
template <typename Real>
void Prepare(const ScreeningShape& shape, const TileScalars* tiles, ScreeningWorkspace<Real>& ws) {
  const int64_t nt = shape.tiles, T = shape.seq, tasks = shape.batch * nt;
  ws.keys.resize(nt);
  ws.rate.resize(nt);
  ws.rate_dw.resize(nt);
  ws.mask_ld = 1;
  for (int64_t t = 0; t < nt; ++t) {
    ws.keys[t] = SoftmaskKeys(tiles[t].w, T);
    ws.mask_ld = std::max(ws.mask_ld, ws.keys[t]);
    MipeRate(tiles[t].mipe_w, shape.w_th, &ws.rate[t], &ws.rate_dw[t]);
    if (shape.position != PositionKind::kMipe) ws.rate[t] = ws.rate_dw[t] = 0;  // NOPE, ROPE: no MiPE
  }
  if (shape.position == PositionKind::kRope) {
    ws.rope.resize(T * shape.d_k);
    ScreeningRopeTable(T, shape.d_k, shape.pos0, ws.rope.data(), shape.rope_scaling);  // YaRN's θ'_p at inference
  }
  ws.mask.resize(nt * ws.mask_ld);
  ws.dmask.resize(nt * ws.mask_ld);
  ws.rotation.resize(nt * T * 2);
  ws.order.resize(tasks);
  for (int64_t i = 0; i < tasks; ++i) ws.order[i] = i;
  // Largest windows first, so that the dynamic schedule ends with small tasks
  // (std::sort with a total order: stable_sort may allocate).
  std::sort(ws.order.begin(), ws.order.end(), [&](int64_t a, int64_t b) {
    return ws.keys[a % nt] != ws.keys[b % nt] ? ws.keys[a % nt] > ws.keys[b % nt] : a < b;
  });
  ws.partial.resize(tasks);
  ws.threads.resize(std::max<size_t>(ws.threads.size(), omp_get_max_threads()));
}

// Tile t's tables: the Softmask (reversed: index keys − 1 − d) and the MiPE rotations.
template <typename Real>
void FillTables(const ScreeningShape& shape, const TileScalars* tiles, int64_t t, ScreeningWorkspace<Real>& ws) {
  const int64_t keys = ws.keys[t], T = shape.seq;
  Real* m = ws.mask.data() + t * ws.mask_ld;
  Real* dm = ws.dmask.data() + t * ws.mask_ld;
  SoftmaskTable(tiles[t].w, keys, m, dm);
  std::reverse(m, m + keys);
  std::reverse(dm, dm + keys);
  // φ_i = (pos0 + i)·rate in fp64: exact sines and cosines every 32 positions, and
  // the angle-addition recurrence by one step in between (error < 1e-14).
  double* rot = ws.rotation.data() + t * T * 2;
  const double rate = ws.rate[t], c1 = std::cos(rate), s1 = std::sin(rate);
  for (int64_t i = 0; i < T; ++i) {
    if (i % 32 == 0) {
      const double phi = static_cast<double>(shape.pos0 + i) * rate;
      rot[2 * i] = std::cos(phi);
      rot[2 * i + 1] = std::sin(phi);
    } else {
      const double c = rot[2 * i - 2], s = rot[2 * i - 1];
      rot[2 * i] = c * c1 - s * s1;
      rot[2 * i + 1] = s * c1 + c * s1;
    }
  }
}

// Runs task(thread scratch, task index) over all (b, tile), threaded.
template <typename Real, typename Task>
void RunTasks(const ScreeningShape& shape, const TileScalars* tiles, ScreeningWorkspace<Real>& ws, Task&& task) {
  Prepare(shape, tiles, ws);
  const int64_t T = shape.seq, tasks = shape.batch * shape.tiles;
  const int64_t dk = shape.d_k, dv = shape.d_v;
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < shape.tiles; ++t) FillTables(shape, tiles, t, ws);
    Thread<Real>& th = ws.threads[omp_get_thread_num()];
    th.k_t.resize(dk * TransposedStride<Real>(T));
    th.s.resize(ws.mask_ld + kSimilarityPad);
    th.weight.resize(ws.mask_ld);
    th.accepted.resize(ws.mask_ld);
    th.dkey.resize(RingSlots(ws.mask_ld) * dk);
    th.dval.resize(RingSlots(ws.mask_ld) * dv);
    th.row.resize(4 * dv + dk);
#pragma omp for schedule(dynamic, 1)
    for (int64_t n = 0; n < tasks; ++n) task(th, ws.order[n]);
  }
}

}  // namespace

template <typename Real>
void ScreenOneQuery(const Real* q, const Real* k, const Real* v, const int64_t* dist, int64_t n,
                    int64_t d_k, int64_t d_v, Real r, const Real* mask, int64_t mask_len, Real* h) {
  std::fill(h, h + d_v, Real(0));
  for (int64_t j = 0; j < n; ++j) {
    if (dist[j] < 0 || (mask != nullptr && dist[j] >= mask_len)) continue;
    const Real a = TrimBase(Dot(q, k + j * d_k, d_k), r);
    if (a <= 0) continue;
    const Real weight = a * a * (mask != nullptr ? mask[dist[j]] : Real(1));
    if (weight != 0) Axpy(weight, v + j * d_v, h, d_v);
  }
}

template <typename Real>
void TileOutputRow(const Real* h, const Real* g, Real scale, int64_t d_v, bool tanh_norm, Real* out) {
  Real sq = 0;
  for (int64_t c = 0; c < d_v; ++c) sq += h[c] * h[c];
  Real f = 1, unused;
  if (tanh_norm) TanhNormScale(std::sqrt(sq), &f, &unused);
  for (int64_t c = 0; c < d_v; ++c) out[c] = scale * h[c] * f * (g != nullptr ? GateForward(g[c]) : Real(1));
}

template <typename Real>
void ScreeningForward(const ScreeningShape& shape, const Real* P, const TileScalars* tiles,
                      const ScreeningSaved<Real>& saved, Real* U, ScreeningWorkspace<Real>* ws) {
  ScreeningWorkspace<Real> temporary;
  if (ws == nullptr) ws = &temporary;
  Call<Real> call{shape, P, tiles, saved, *ws};
  call.U = U;
  const bool fixed = shape.d_k == 16 && shape.d_v == 64;
  RunTasks(shape, tiles, *ws, [&](Thread<Real>& th, int64_t task) {
    if (fixed) {
      IsaDispatch<ForwardTask<Real, 16, 64>>(call, task, th);
    } else {
      IsaDispatch<ForwardTask<Real, 0, 0>>(call, task, th);
    }
  });
}

template <typename Real>
void ScreeningBackward(const ScreeningShape& shape, const Real* P, const TileScalars* tiles,
                       const ScreeningSaved<Real>& saved, const Real* dU, Real* dP,
                       TileScalarGrads* grads, ScreeningWorkspace<Real>* ws) {
  ScreeningWorkspace<Real> temporary;
  if (ws == nullptr) ws = &temporary;
  Call<Real> call{shape, P, tiles, saved, *ws};
  call.dU = dU;
  call.dP = dP;
  const bool fixed = shape.d_k == 16 && shape.d_v == 64;
  RunTasks(shape, tiles, *ws, [&](Thread<Real>& th, int64_t task) {
    if (fixed) {
      IsaDispatch<BackwardTask<Real, 16, 64>>(call, task, th, &ws->partial[task]);
    } else {
      IsaDispatch<BackwardTask<Real, 0, 0>>(call, task, th, &ws->partial[task]);
    }
  });
  // Sum over the batch in a fixed order (deterministic whatever the threads).
  const int64_t nt = shape.tiles;
  for (int64_t t = 0; t < nt; ++t) {
    grads[t] = TileScalarGrads{};
    for (int64_t b = 0; b < shape.batch; ++b) {
      grads[t].w += ws->partial[b * nt + t].w;
      grads[t].r += ws->partial[b * nt + t].r;
      grads[t].scale += ws->partial[b * nt + t].scale;
    }
  }
}

#define MS_INSTANTIATE(Real)                                                                         \
  template void ScreeningForward<Real>(const ScreeningShape&, const Real*, const TileScalars*,       \
                                       const ScreeningSaved<Real>&, Real*, ScreeningWorkspace<Real>*); \
  template void ScreeningBackward<Real>(const ScreeningShape&, const Real*, const TileScalars*,      \
                                        const ScreeningSaved<Real>&, const Real*, Real*,             \
                                        TileScalarGrads*, ScreeningWorkspace<Real>*);                \
  template void ScreenOneQuery<Real>(const Real*, const Real*, const Real*, const int64_t*, int64_t, \
                                     int64_t, int64_t, Real, const Real*, int64_t, Real*);           \
  template void TileOutputRow<Real>(const Real*, const Real*, Real, int64_t, bool, Real*);
MS_INSTANTIATE(float)
MS_INSTANTIATE(double)
#undef MS_INSTANTIATE

}  // namespace multiscreen::kernels::cpu
