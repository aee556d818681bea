#include "kernels/cpu/attention_cache.h"

#include <algorithm>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/unit_rows.h"

namespace multiscreen::kernels::cpu {

template <typename Real>
void CpuAttentionCache<Real>::Step(const Real* qkv, int64_t pos, Real* o) {
  StepRows(qkv, 3 * shape_.heads * shape_.d_h, 1, pos, o, shape_.heads * shape_.d_h);
}

template <typename Real>
void CpuAttentionCache<Real>::StepRows(const Real* qkv, int64_t ldqkv, int64_t rows, int64_t pos0, Real* o,
                                       int64_t ldo) {
  const int64_t H = shape_.heads, dh = shape_.d_h, dl = H * dh;
  // Each row's q and k turned by RoPE at its position (unit per head with QKNorm); the
  // cache grows by the rows' k and v.
  q_.resize(rows * dl);
  std::vector<Real> norm(H);
  for (int64_t r = 0; r < rows; ++r) {
    const Real* row = qkv + r * ldqkv;
    const int64_t pos = pos0 + r;
    Real* q = q_.data() + r * dl;
    std::copy(row, row + dl, q);
    k_.insert(k_.end(), row + dl, row + 2 * dl);
    v_.insert(v_.end(), row + 2 * dl, row + 3 * dl);
    Real* kn = k_.data() + pos * dl;
    Rope(q, dl, 1, 1, H, dh, false, pos, shape_.rope_scaling);
    Rope(kn, dl, 1, 1, H, dh, false, pos, shape_.rope_scaling);
    if (shape_.qk_norm) {
      UnitRowsForward(q, dh, q, dh, norm.data(), H, dh);
      UnitRowsForward(kn, dh, kn, dh, norm.data(), H, dh);
    }
  }
  // o_h = Σ_j p_j v_j,h over the n = pos + 1 cached positions of the row's own, p the
  // mechanism's weights of the scores z_j = c · q_h · k_j,h, c = scale_h (SSMax: times
  // log n) (fp64 weights).
#pragma omp parallel if (rows > 1)
  {
    std::vector<double> z(pos0 + rows), p(pos0 + rows), work(pos0 + rows);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < rows * H; ++task) {
      const int64_t r = task / H, h = task % H, pos = pos0 + r, n = pos + 1;
      const Real* q = q_.data() + r * dl;
      const double lambda = AttentionLengthFactor(shape_.kind, pos);
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t c = 0; c < dh; ++c) s += double(q[h * dh + c]) * k_[j * dl + h * dh + c];
        z[j] = shape_.scale[h] * lambda * s;
      }
      AttentionWeights(shape_.kind, z.data(), n, SigmoidBias(shape_.sigmoid_bias_length, pos), p.data(), work.data());
      for (int64_t c = 0; c < dh; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < n; ++j) acc += p[j] * v_[j * dl + h * dh + c];
        o[r * ldo + h * dh + c] = static_cast<Real>(acc);
      }
    }
  }
}

template class CpuAttentionCache<float>;
template class CpuAttentionCache<double>;

}  // namespace multiscreen::kernels::cpu
