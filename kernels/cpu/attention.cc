#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <functional>
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

inline double Sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

bool SoftmaxLike(AttentionKind kind) {
  return kind == AttentionKind::kSoftmax || kind == AttentionKind::kSoftmax1 || kind == AttentionKind::kSsmax;
}

// The weight p_ij of score z = z_ij of query i from the forward's row statistic `stat`
// (lse, τ, or sigmoid's bias b_i): the one switch of the score → weight map.
inline double Weight(AttentionKind kind, double z, double stat) {
  switch (kind) {
    case AttentionKind::kSoftmax: case AttentionKind::kSoftmax1: case AttentionKind::kSsmax:
      return std::exp(z - stat);
    case AttentionKind::kSigmoid:
      return Sigmoid(z + stat);
    case AttentionKind::kEntmax15: {
      const double t = 0.5 * z - stat;
      return t > 0 ? t * t : 0.0;
    }
    case AttentionKind::kScreening: break;  // not a score map: model/transformer.h screens instead
  }
  return 0;
}

// ∂L/∂z_ij from p_ij, dp_ij = do_i · v_j and the row's constant D_i (softmax-like: do_i · o_i;
// entmax: Σ_k √p_ik dp_ik / Σ_k √p_ik; sigmoid: unused): the one switch of the backward.
inline double ScoreGrad(AttentionKind kind, double p, double dp, double D) {
  switch (kind) {
    case AttentionKind::kSoftmax: case AttentionKind::kSoftmax1: case AttentionKind::kSsmax:
      return p * (dp - D);
    case AttentionKind::kSigmoid:
      return dp * p * (1.0 - p);
    case AttentionKind::kEntmax15:
      return std::sqrt(p) * (dp - D);
    case AttentionKind::kScreening: break;
  }
  return 0;
}

}  // namespace

double Entmax15Threshold(const double* y, int64_t n, double* work) {
  std::copy_n(y, n, work);
  std::sort(work, work + n, std::greater<double>());
  double s1 = 0, s2 = 0, tau = work[0] - 1.0;
  for (int64_t k = 1; k <= n; ++k) {
    const double u = work[k - 1];
    s1 += u;
    s2 += u * u;
    const double mean = s1 / double(k), delta = (1.0 - (s2 - double(k) * mean * mean)) / double(k);
    if (delta < 0) break;
    const double t = mean - std::sqrt(delta);
    if (t > u) break;  // the support {u_1..u_k} is no longer consistent: k − 1 was the last
    tau = t;
  }
  return tau;
}

void AttentionWeights(AttentionKind kind, const double* z, int64_t n, double sigmoid_bias, double* p, double* work) {
  if (kind == AttentionKind::kEntmax15) {
    for (int64_t j = 0; j < n; ++j) p[j] = 0.5 * z[j];
    const double tau = Entmax15Threshold(p, n, work);
    for (int64_t j = 0; j < n; ++j) p[j] = Weight(kind, z[j], tau);
    return;
  }
  if (kind == AttentionKind::kSigmoid) {
    for (int64_t j = 0; j < n; ++j) p[j] = Weight(kind, z[j], sigmoid_bias);
    return;
  }
  // Softmax-like: lse with softmax1's e^0 term.
  double m = kind == AttentionKind::kSoftmax1 ? 0.0 : -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) m = std::max(m, z[j]);
  double sum = kind == AttentionKind::kSoftmax1 ? std::exp(-m) : 0.0;
  for (int64_t j = 0; j < n; ++j) sum += std::exp(z[j] - m);
  const double lse = m + std::log(sum);
  for (int64_t j = 0; j < n; ++j) p[j] = Weight(kind, z[j], lse);
}

template <typename Real>
void AttentionForward(const AttentionShape& sh, const Real* q, const Real* k, const Real* v, const double* scale,
                      Real* o, double* stat) {
  const int64_t T = sh.seq, H = sh.heads, dh = sh.d_h, ld = H * dh, Bq = kAttentionBlock, Bk = kAttentionBlock;
  const AttentionKind kind = sh.kind;
#pragma omp parallel
  {
    // Per thread: one block of scores, and each block row's running max, sum and output
    // (entmax: one query's whole row of scores and a sort buffer).
    std::vector<double> s(Bq * Bk), m(Bq), l(Bq), acc(Bq * dh), row, work;
#pragma omp for schedule(dynamic)
    for (int64_t bh = 0; bh < sh.batch * H; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const Real* qb = q + b * T * ld + h * dh;
      const Real* kb = k + b * T * ld + h * dh;
      const Real* vb = v + b * T * ld + h * dh;
      Real* ob = o + b * T * ld + h * dh;
      double* stat_b = stat + (b * H + h) * T;
      if (kind == AttentionKind::kEntmax15) {
        row.resize(T);
        work.resize(T);
        for (int64_t i = 0; i < T; ++i) {
          for (int64_t j = 0; j <= i; ++j) row[j] = 0.5 * scale[h] * DotRow(qb + i * ld, kb + j * ld, dh);
          const double tau = Entmax15Threshold(row.data(), i + 1, work.data());
          double* a = acc.data();
          std::fill(a, a + dh, 0.0);
          for (int64_t j = 0; j <= i; ++j) {
            const double t = row[j] - tau;
            if (t <= 0) continue;
            const Real* vj = vb + j * ld;
            for (int64_t c = 0; c < dh; ++c) a[c] += t * t * double(vj[c]);
          }
          for (int64_t c = 0; c < dh; ++c) ob[i * ld + c] = static_cast<Real>(a[c]);
          stat_b[i] = tau;
        }
        continue;
      }
      for (int64_t i0 = 0; i0 < T; i0 += Bq) {
        const int64_t i1 = std::min(T, i0 + Bq);
        // softmax1's extra e^0 in the denominator: the running max and sum start at 0 and 1.
        const bool plus_one = kind == AttentionKind::kSoftmax1;
        std::fill(m.begin(), m.end(), plus_one ? 0.0 : -std::numeric_limits<double>::infinity());
        std::fill(l.begin(), l.end(), plus_one ? 1.0 : 0.0);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j0 = 0; j0 < i1; j0 += Bk) {
          const int64_t j1 = std::min(i1, j0 + Bk);
          for (int64_t i = i0; i < i1; ++i) {
            const int64_t ii = i - i0, jend = std::min(j1, i + 1);
            if (jend <= j0) continue;
            const double c_i = scale[h] * AttentionLengthFactor(kind, i);
            double* a = acc.data() + ii * dh;
            if (kind == AttentionKind::kSigmoid) {  // no normalizer: weights add up directly
              const double bias = SigmoidBias(sh.sigmoid_bias_length, i);
              for (int64_t j = j0; j < jend; ++j) {
                const double p = Sigmoid(c_i * DotRow(qb + i * ld, kb + j * ld, dh) + bias);
                const Real* vj = vb + j * ld;
                for (int64_t c = 0; c < dh; ++c) a[c] += p * double(vj[c]);
              }
              continue;
            }
            double bmax = -std::numeric_limits<double>::infinity();
            for (int64_t j = j0; j < jend; ++j) {
              const double x = c_i * DotRow(qb + i * ld, kb + j * ld, dh);
              s[ii * Bk + (j - j0)] = x;
              bmax = std::max(bmax, x);
            }
            const double m_new = std::max(m[ii], bmax), rescale = std::exp(m[ii] - m_new);
            l[ii] *= rescale;
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
          if (kind == AttentionKind::kSigmoid) {
            for (int64_t c = 0; c < dh; ++c) ob[i * ld + c] = static_cast<Real>(acc[ii * dh + c]);
            stat_b[i] = SigmoidBias(sh.sigmoid_bias_length, i);
            continue;
          }
          for (int64_t c = 0; c < dh; ++c) ob[i * ld + c] = static_cast<Real>(acc[ii * dh + c] / l[ii]);
          stat_b[i] = m[ii] + std::log(l[ii]);
        }
      }
    }
  }
}

template <typename Real>
void AttentionBackward(const AttentionShape& sh, const Real* q, const Real* k, const Real* v, const Real* o,
                       const double* stat, const Real* d_o, const double* scale, Real* dq, Real* dk, Real* dv,
                       double* d_scale) {
  const int64_t T = sh.seq, H = sh.heads, dh = sh.d_h, ld = H * dh, Bq = kAttentionBlock, Bk = kAttentionBlock;
  const AttentionKind kind = sh.kind;
  std::vector<double> scale_parts(sh.batch * H, 0.0);  // per (b, h), summed in order below
#pragma omp parallel
  {
    // Per thread: one block of ∂L/∂z, each block row's constant D_i, and fp64
    // accumulators for the (b, h) pair's dq, dk, dv.
    std::vector<double> ds(Bq * Bk), D(Bq), gq, gk, gv;
#pragma omp for schedule(dynamic)
    for (int64_t bh = 0; bh < sh.batch * H; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const int64_t base = b * T * ld + h * dh;
      const Real *qb = q + base, *kb = k + base, *vb = v + base, *ob = o + base, *dob = d_o + base;
      const double* stat_b = stat + (b * H + h) * T;
      gq.assign(T * dh, 0.0);
      gk.assign(T * dh, 0.0);
      gv.assign(T * dh, 0.0);
      double g_scale = 0;
      for (int64_t i0 = 0; i0 < T; i0 += Bq) {
        const int64_t i1 = std::min(T, i0 + Bq);
        for (int64_t i = i0; i < i1; ++i) {
          if (SoftmaxLike(kind)) {
            D[i - i0] = DotRow(dob + i * ld, ob + i * ld, dh);
          } else if (kind == AttentionKind::kEntmax15) {  // a pass over the row: Σ g dp / Σ g
            double gdp = 0, gsum = 0;
            for (int64_t j = 0; j <= i; ++j) {
              const double t = 0.5 * scale[h] * DotRow(qb + i * ld, kb + j * ld, dh) - stat_b[i];
              if (t <= 0) continue;
              gdp += t * DotRow(dob + i * ld, vb + j * ld, dh);
              gsum += t;
            }
            D[i - i0] = gdp / gsum;
          } else {
            D[i - i0] = 0;
          }
        }
        for (int64_t j0 = 0; j0 < i1; j0 += Bk) {
          const int64_t j1 = std::min(i1, j0 + Bk);
          for (int64_t i = i0; i < i1; ++i) {
            const int64_t ii = i - i0, jend = std::min(j1, i + 1);
            const double lambda = AttentionLengthFactor(kind, i), c_i = scale[h] * lambda;
            for (int64_t j = j0; j < jend; ++j) {
              const double dot = DotRow(qb + i * ld, kb + j * ld, dh);
              const double p = Weight(kind, c_i * dot, stat_b[i]);
              const double dp = DotRow(dob + i * ld, vb + j * ld, dh);
              const double g = ScoreGrad(kind, p, dp, D[ii]);  // ∂L/∂z_ij
              ds[ii * Bk + (j - j0)] = g;
              g_scale += g * lambda * dot;
              if (p == 0) continue;
              double* gvj = gv.data() + j * dh;
              const Real* doi = dob + i * ld;
              for (int64_t c = 0; c < dh; ++c) gvj[c] += p * double(doi[c]);
            }
          }
          // dq_i += c_i Σ_j ds_ij k_j; dk_j += c_i Σ_i ds_ij q_i.
          for (int64_t i = i0; i < i1; ++i) {
            const int64_t ii = i - i0, jend = std::min(j1, i + 1);
            const double c_i = scale[h] * AttentionLengthFactor(kind, i);
            double* gqi = gq.data() + i * dh;
            const Real* qi = qb + i * ld;
            for (int64_t j = j0; j < jend; ++j) {
              const double g = c_i * ds[ii * Bk + (j - j0)];
              if (g == 0) continue;
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
