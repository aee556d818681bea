#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace multiscreen::kernels::cpu {
namespace {

template <typename Real>
inline double DotRow(const Real* a, const Real* b, int64_t n) {
  double s = 0;
  for (int64_t c = 0; c < n; ++c) s += double(a[c]) * double(b[c]);
  return s;
}

}  // namespace

template <typename Real>
void AttentionForward(const AttentionShape& sh, const Real* q, const Real* k, const Real* v, const double* scale,
                      Real* o, double* lse) {
  const int64_t T = sh.seq, H = sh.heads, dh = sh.d_h, ld = H * dh, Bq = kAttentionBlock, Bk = kAttentionBlock;
#pragma omp parallel
  {
    // Per thread: one block of scores, and each block row's running max, sum and output.
    std::vector<double> s(Bq * Bk), m(Bq), l(Bq), acc(Bq * dh);
#pragma omp for schedule(dynamic)
    for (int64_t bh = 0; bh < sh.batch * H; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const Real* qb = q + b * T * ld + h * dh;
      const Real* kb = k + b * T * ld + h * dh;
      const Real* vb = v + b * T * ld + h * dh;
      Real* ob = o + b * T * ld + h * dh;
      for (int64_t i0 = 0; i0 < T; i0 += Bq) {
        const int64_t i1 = std::min(T, i0 + Bq);
        std::fill(m.begin(), m.end(), -std::numeric_limits<double>::infinity());
        std::fill(l.begin(), l.end(), 0.0);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j0 = 0; j0 < i1; j0 += Bk) {
          const int64_t j1 = std::min(i1, j0 + Bk);
          for (int64_t i = i0; i < i1; ++i) {
            const int64_t ii = i - i0, jend = std::min(j1, i + 1);
            if (jend <= j0) continue;
            double bmax = -std::numeric_limits<double>::infinity();
            for (int64_t j = j0; j < jend; ++j) {
              const double x = scale[h] * DotRow(qb + i * ld, kb + j * ld, dh);
              s[ii * Bk + (j - j0)] = x;
              bmax = std::max(bmax, x);
            }
            const double m_new = std::max(m[ii], bmax), rescale = std::exp(m[ii] - m_new);
            l[ii] *= rescale;
            double* a = acc.data() + ii * dh;
            for (int64_t c = 0; c < dh; ++c) a[c] *= rescale;
            for (int64_t j = j0; j < jend; ++j) {
              const double p = std::exp(s[ii * Bk + (j - j0)] - m_new);
              l[ii] += p;
              const Real* vj = vb + j * ld;
              for (int64_t c = 0; c < dh; ++c) a[c] += p * double(vj[c]);
            }
            m[ii] = m_new;
          }
        }
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t ii = i - i0;
          for (int64_t c = 0; c < dh; ++c) ob[i * ld + c] = static_cast<Real>(acc[ii * dh + c] / l[ii]);
          lse[(b * H + h) * T + i] = m[ii] + std::log(l[ii]);
        }
      }
    }
  }
}

template <typename Real>
void AttentionBackward(const AttentionShape& sh, const Real* q, const Real* k, const Real* v, const Real* o,
                       const double* lse, const Real* d_o, const double* scale, Real* dq, Real* dk, Real* dv,
                       double* d_scale) {
  const int64_t T = sh.seq, H = sh.heads, dh = sh.d_h, ld = H * dh, Bq = kAttentionBlock, Bk = kAttentionBlock;
  std::vector<double> scale_parts(sh.batch * H, 0.0);  // per (b, h), summed in order below
#pragma omp parallel
  {
    // Per thread: one block of ∂L/∂s, each block row's D_i = do_i · o_i, and fp64
    // accumulators for the (b, h) pair's dq, dk, dv.
    std::vector<double> ds(Bq * Bk), D(Bq), gq, gk, gv;
#pragma omp for schedule(dynamic)
    for (int64_t bh = 0; bh < sh.batch * H; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const int64_t base = b * T * ld + h * dh;
      const Real *qb = q + base, *kb = k + base, *vb = v + base, *ob = o + base, *dob = d_o + base;
      const double* lse_b = lse + (b * H + h) * T;
      gq.assign(T * dh, 0.0);
      gk.assign(T * dh, 0.0);
      gv.assign(T * dh, 0.0);
      double g_scale = 0;
      for (int64_t i0 = 0; i0 < T; i0 += Bq) {
        const int64_t i1 = std::min(T, i0 + Bq);
        for (int64_t i = i0; i < i1; ++i) D[i - i0] = DotRow(dob + i * ld, ob + i * ld, dh);
        for (int64_t j0 = 0; j0 < i1; j0 += Bk) {
          const int64_t j1 = std::min(i1, j0 + Bk);
          for (int64_t i = i0; i < i1; ++i) {
            const int64_t ii = i - i0, jend = std::min(j1, i + 1);
            for (int64_t j = j0; j < jend; ++j) {
              const double dot = DotRow(qb + i * ld, kb + j * ld, dh);
              const double p = std::exp(scale[h] * dot - lse_b[i]);
              const double dp = DotRow(dob + i * ld, vb + j * ld, dh);
              const double g = p * (dp - D[ii]);  // ∂L/∂s_ij
              ds[ii * Bk + (j - j0)] = g;
              g_scale += g * dot;
              double* gvj = gv.data() + j * dh;
              const Real* doi = dob + i * ld;
              for (int64_t c = 0; c < dh; ++c) gvj[c] += p * double(doi[c]);
            }
          }
          // dq_i += scale Σ_j ds_ij k_j; dk_j += scale Σ_i ds_ij q_i.
          for (int64_t i = i0; i < i1; ++i) {
            const int64_t ii = i - i0, jend = std::min(j1, i + 1);
            double* gqi = gq.data() + i * dh;
            const Real* qi = qb + i * ld;
            for (int64_t j = j0; j < jend; ++j) {
              const double g = scale[h] * ds[ii * Bk + (j - j0)];
              const Real* kj = kb + j * ld;
              double* gkj = gk.data() + j * dh;
              for (int64_t c = 0; c < dh; ++c) {
                gqi[c] += g * double(kj[c]);
                gkj[c] += g * double(qi[c]);
              }
            }
          }
        }
      }
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t c = 0; c < dh; ++c) {
          dq[base + t * ld + c] = static_cast<Real>(gq[t * dh + c]);
          dk[base + t * ld + c] = static_cast<Real>(gk[t * dh + c]);
          dv[base + t * ld + c] = static_cast<Real>(gv[t * dh + c]);
        }
      }
      scale_parts[bh] = g_scale;
    }
  }
  for (int64_t h = 0; h < H; ++h) d_scale[h] = 0;
  for (int64_t bh = 0; bh < sh.batch * H; ++bh) d_scale[bh % H] += scale_parts[bh];
}

template void AttentionForward<float>(const AttentionShape&, const float*, const float*, const float*, const double*,
                                      float*, double*);
template void AttentionForward<double>(const AttentionShape&, const double*, const double*, const double*,
                                       const double*, double*, double*);
template void AttentionBackward<float>(const AttentionShape&, const float*, const float*, const float*, const float*,
                                       const double*, const float*, const double*, float*, float*, float*, double*);
template void AttentionBackward<double>(const AttentionShape&, const double*, const double*, const double*,
                                        const double*, const double*, const double*, const double*, double*, double*,
                                        double*, double*);

}  // namespace multiscreen::kernels::cpu
