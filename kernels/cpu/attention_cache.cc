#include "kernels/cpu/attention_cache.h"

#include <algorithm>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/unit_rows.h"

namespace multiscreen::kernels::cpu {

template <typename Real>
void CpuAttentionCache<Real>::Step(const Real* qkv, int64_t pos, Real* o) {
  const int64_t H = shape_.heads, dh = shape_.d_h, dl = H * dh, n = pos + 1;
  // q, k turned by RoPE at pos, [unit per head]; the cache grows by k, v.
  q_.assign(qkv, qkv + dl);
  k_.insert(k_.end(), qkv + dl, qkv + 2 * dl);
  v_.insert(v_.end(), qkv + 2 * dl, qkv + 3 * dl);
  Real* kn = k_.data() + pos * dl;
  Rope(q_.data(), dl, 1, 1, H, dh, false, pos, shape_.rope_scaling);
  Rope(kn, dl, 1, 1, H, dh, false, pos, shape_.rope_scaling);
  if (shape_.qk_norm) {
    std::vector<Real> norm(H);
    UnitRowsForward(q_.data(), dh, q_.data(), dh, norm.data(), H, dh);
    UnitRowsForward(kn, dh, kn, dh, norm.data(), H, dh);
  }
  // o_h = Σ_j p_j v_j,h over the n cached positions, p the mechanism's weights of the
  // scores z_j = c · q_h · k_j,h, c = scale_h (SSMax: times log n) (fp64 weights).
  z_.resize(n);
  p_.resize(n);
  work_.resize(n);
  const double lambda = AttentionLengthFactor(shape_.kind, pos);
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t c = 0; c < dh; ++c) s += double(q_[h * dh + c]) * k_[j * dl + h * dh + c];
      z_[j] = shape_.scale[h] * lambda * s;
    }
    AttentionWeights(shape_.kind, z_.data(), n, p_.data(), work_.data());
    for (int64_t c = 0; c < dh; ++c) {
      double acc = 0;
      for (int64_t j = 0; j < n; ++j) acc += p_[j] * v_[j * dl + h * dh + c];
      o[h * dh + c] = static_cast<Real>(acc);
    }
  }
}

template class CpuAttentionCache<float>;
template class CpuAttentionCache<double>;

}  // namespace multiscreen::kernels::cpu
