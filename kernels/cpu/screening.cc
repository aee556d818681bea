#include "kernels/cpu/screening.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/gate.h"
#include "kernels/cpu/mipe.h"
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
inline Real TrimBase(Real s, Real r) {
  return Real(1) - (Real(1) - s) / r;
}

// Softmask tables of every tile, [tiles][keys].
template <typename Real>
struct MaskTables {
  std::vector<int64_t> keys;
  std::vector<std::vector<Real>> m, dm;
  MaskTables(const ScreeningShape& shape, const TileScalars* tiles) {
    keys.resize(shape.tiles);
    m.resize(shape.tiles);
    dm.resize(shape.tiles);
    for (int64_t t = 0; t < shape.tiles; ++t) {
      keys[t] = SoftmaskKeys(tiles[t].w, shape.seq);
      m[t].resize(keys[t]);
      dm[t].resize(keys[t]);
      SoftmaskTable(tiles[t].w, keys[t], m[t].data(), dm[t].data());
    }
  }
};

// h_i = Σ_{j in window} α_ij m_ij v̄_j for one (sequence, tile); h written.
template <typename Real>
void AggregateForward(const Real* q, const Real* k, const Real* v, Real* h, int64_t T, int64_t dk,
                      int64_t dv, Real r, const Real* mask, int64_t keys) {
  for (int64_t i = 0; i < T; ++i) {
    Real* hi = h + i * dv;
    std::fill(hi, hi + dv, Real(0));
    const Real* qi = q + i * dk;
    for (int64_t j = std::max<int64_t>(0, i - keys + 1); j <= i; ++j) {
      const Real a = TrimBase(Dot(qi, k + j * dk, dk), r);
      if (a <= 0) continue;
      const Real weight = a * a * mask[i - j];
      if (weight != 0) Axpy(weight, v + j * dv, hi, dv);
    }
  }
}

// Backward of AggregateForward: dq, dk, dv accumulated (+=); returns ∂L/∂r and
// the Softmask part of ∂L/∂w through *dr and *dw (fp64 sums over all pairs).
template <typename Real>
void AggregateBackward(const Real* q, const Real* k, const Real* v, const Real* dh, Real* dq,
                       Real* dkey, Real* dval, int64_t T, int64_t dk, int64_t dv, Real r,
                       const Real* mask, const Real* dmask, int64_t keys, double* dr, double* dw) {
  double sum_r = 0, sum_w = 0;
  for (int64_t i = 0; i < T; ++i) {
    const Real* qi = q + i * dk;
    const Real* dhi = dh + i * dv;
    Real* dqi = dq + i * dk;
    for (int64_t j = std::max<int64_t>(0, i - keys + 1); j <= i; ++j) {
      const Real* kj = k + j * dk;
      const Real s = Dot(qi, kj, dk);
      const Real a = TrimBase(s, r);
      if (a <= 0) continue;
      const int64_t d = i - j;
      const Real m = mask[d];
      const Real* vj = v + j * dv;
      const Real d_weight = Dot(dhi, vj, dv);  // ∂L/∂(α m)
      const Real weight = a * a * m;
      if (weight != 0) Axpy(weight, dhi, dval + j * dv, dv);
      const Real ds = d_weight * m * Real(2) * a / r;
      sum_r += static_cast<double>(d_weight) * m * 2.0 * a * (1.0 - s) / (double(r) * r);
      sum_w += static_cast<double>(d_weight) * a * a * dmask[d];
      if (ds != 0) {
        Axpy(ds, kj, dqi, dk);
        Axpy(ds, qi, dkey + j * dk, dk);
      }
    }
  }
  *dr = sum_r;
  *dw = sum_w;
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
void TileOutputRow(const Real* h, const Real* g, Real scale, int64_t d_v, Real* out) {
  Real sq = 0;
  for (int64_t c = 0; c < d_v; ++c) sq += h[c] * h[c];
  Real f, unused;
  TanhNormScale(std::sqrt(sq), &f, &unused);
  for (int64_t c = 0; c < d_v; ++c) out[c] = scale * h[c] * f * GateForward(g[c]);
}

template <typename Real>
void ScreeningForward(const ScreeningShape& shape, const Real* P, const TileScalars* tiles,
                      const ScreeningSaved<Real>& saved, Real* U) {
  const int64_t T = shape.seq, dk = shape.d_k, dv = shape.d_v, nt = shape.tiles;
  const int64_t C = shape.p_cols(), ldp = nt * C, ldu = nt * dv;
  const MaskTables<Real> tables(shape, tiles);
#pragma omp parallel for schedule(dynamic)
  for (int64_t task = 0; task < shape.batch * nt; ++task) {
    const int64_t b = task / nt, t = task % nt;
    const TileScalars& tile = tiles[t];
    const Real* Pb = P + b * T * ldp + t * C;
    Real* qt = saved.q_tilde + task * T * dk;
    Real* kt = saved.k_tilde + task * T * dk;
    Real* vb = saved.v_bar + task * T * dv;
    Real* h = saved.h + task * T * dv;
    double rate, rate_dw;
    MipeRate(tile.mipe_w, shape.w_th, &rate, &rate_dw);
    UnitRowsForward(Pb, ldp, qt, dk, saved.q_norm + task * T, T, dk);
    UnitRowsForward(Pb + dk, ldp, kt, dk, saved.k_norm + task * T, T, dk);
    UnitRowsForward(Pb + 2 * dk, ldp, vb, dv, saved.v_norm + task * T, T, dv);
    MipeRotateForward(qt, dk, T, shape.pos0, rate);
    MipeRotateForward(kt, dk, T, shape.pos0, rate);
    AggregateForward(qt, kt, vb, h, T, dk, dv, static_cast<Real>(tile.r), tables.m[t].data(),
                     tables.keys[t]);
    for (int64_t i = 0; i < T; ++i) {
      TileOutputRow(h + i * dv, Pb + i * ldp + 2 * dk + dv, static_cast<Real>(tile.scale), dv,
                    U + (b * T + i) * ldu + t * dv);
    }
  }
}

template <typename Real>
void ScreeningBackward(const ScreeningShape& shape, const Real* P, const TileScalars* tiles,
                       const ScreeningSaved<Real>& saved, const Real* dU, Real* dP,
                       TileScalarGrads* grads) {
  const int64_t T = shape.seq, dk = shape.d_k, dv = shape.d_v, nt = shape.tiles;
  const int64_t C = shape.p_cols(), ldp = nt * C, ldu = nt * dv;
  const MaskTables<Real> tables(shape, tiles);
  std::vector<TileScalarGrads> partial(shape.batch * nt);
#pragma omp parallel for schedule(dynamic)
  for (int64_t task = 0; task < shape.batch * nt; ++task) {
    const int64_t b = task / nt, t = task % nt;
    const TileScalars& tile = tiles[t];
    const Real scale = static_cast<Real>(tile.scale);
    const Real* Pb = P + b * T * ldp + t * C;
    Real* dPb = dP + b * T * ldp + t * C;
    const Real* qt = saved.q_tilde + task * T * dk;
    const Real* kt = saved.k_tilde + task * T * dk;
    const Real* vb = saved.v_bar + task * T * dv;
    const Real* h = saved.h + task * T * dv;
    std::vector<Real> d_tn(T * dv), dh(T * dv), dq(T * dk, 0), dkey(T * dk, 0), dval(T * dv, 0), bar(T * dk);
    TileScalarGrads& g_out = partial[task];
    // Output scale and gate (steps 12–13), then TanhNorm (step 11).
    double d_scale = 0;
    for (int64_t i = 0; i < T; ++i) {
      const Real* hi = h + i * dv;
      Real f, unused;
      TanhNormScale(std::sqrt(Dot(hi, hi, dv)), &f, &unused);
      const Real* g = Pb + i * ldp + 2 * dk + dv;
      const Real* dUi = dU + (b * T + i) * ldu + t * dv;
      Real* dg = dPb + i * ldp + 2 * dk + dv;
      for (int64_t c = 0; c < dv; ++c) {
        const Real tn = hi[c] * f, gate = GateForward(g[c]);
        d_scale += static_cast<double>(dUi[c]) * tn * gate;
        d_tn[i * dv + c] = scale * dUi[c] * gate;
        dg[c] = scale * dUi[c] * tn * GateDerivative(g[c]);
      }
    }
    g_out.scale = d_scale;
    TanhNormBackward(h, d_tn.data(), dh.data(), T, dv);
    // Aggregate, Trim, Softmask (steps 7–10).
    double dr, dw;
    AggregateBackward(qt, kt, vb, dh.data(), dq.data(), dkey.data(), dval.data(), T, dk, dv,
                      static_cast<Real>(tile.r), tables.m[t].data(), tables.dm[t].data(), tables.keys[t],
                      &dr, &dw);
    // MiPE (step 6), then unit normalization (step 5), into dP.
    double rate, rate_dw;
    MipeRate(tile.mipe_w, shape.w_th, &rate, &rate_dw);
    const double d_rate = MipeRotateBackward(qt, dk, dq.data(), dk, T, shape.pos0, rate) +
                          MipeRotateBackward(kt, dk, dkey.data(), dk, T, shape.pos0, rate);
    g_out.r = dr;
    g_out.w = dw + d_rate * rate_dw;
    std::copy(qt, qt + T * dk, bar.begin());
    MipeRotateForward(bar.data(), dk, T, shape.pos0, -rate);
    UnitRowsBackward(bar.data(), dk, saved.q_norm + task * T, dq.data(), dk, dPb, ldp, T, dk, false);
    std::copy(kt, kt + T * dk, bar.begin());
    MipeRotateForward(bar.data(), dk, T, shape.pos0, -rate);
    UnitRowsBackward(bar.data(), dk, saved.k_norm + task * T, dkey.data(), dk, dPb + dk, ldp, T, dk, false);
    UnitRowsBackward(vb, dv, saved.v_norm + task * T, dval.data(), dv, dPb + 2 * dk, ldp, T, dv, false);
  }
  // Sum over the batch in a fixed order (deterministic whatever the threads).
  for (int64_t t = 0; t < nt; ++t) {
    grads[t] = TileScalarGrads{};
    for (int64_t b = 0; b < shape.batch; ++b) {
      grads[t].w += partial[b * nt + t].w;
      grads[t].r += partial[b * nt + t].r;
      grads[t].scale += partial[b * nt + t].scale;
    }
  }
}

#define MS_INSTANTIATE(Real)                                                                     \
  template void ScreeningForward<Real>(const ScreeningShape&, const Real*, const TileScalars*,   \
                                       const ScreeningSaved<Real>&, Real*);                      \
  template void ScreeningBackward<Real>(const ScreeningShape&, const Real*, const TileScalars*,  \
                                        const ScreeningSaved<Real>&, const Real*, Real*,         \
                                        TileScalarGrads*);                                       \
  template void ScreenOneQuery<Real>(const Real*, const Real*, const Real*, const int64_t*,      \
                                     int64_t, int64_t, int64_t, Real, const Real*, int64_t, Real*); \
  template void TileOutputRow<Real>(const Real*, const Real*, Real, int64_t, Real*);
MS_INSTANTIATE(float)
MS_INSTANTIATE(double)
#undef MS_INSTANTIATE

}  // namespace multiscreen::kernels::cpu
