// Softmask (spec step 9): m(d) = ½(cos(π d/w) + 1) for key distance d = i − j in
// [0, w), else 0. Causal, and exactly zero from distance w on, so a tile sees at
// most ⌈w⌉ keys. An infinite window (inference window expansion) is the plain
// causal mask m = 1.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

namespace multiscreen::kernels::cpu {

// Number of key distances d = 0, 1, … with m(d) > 0 or inside the window,
// capped at max_keys: min(⌈w⌉, max_keys), or max_keys for infinite w.
inline int64_t SoftmaskKeys(double w, int64_t max_keys) {
  if (std::isinf(w)) return max_keys;
  const double keys = std::ceil(w);
  return keys < static_cast<double>(max_keys) ? static_cast<int64_t>(keys) : max_keys;
}

// Fills m[d] and dm[d] = ∂m/∂w = (π d/(2w²)) sin(π d/w) for d in [0, keys).
template <typename Real>
void SoftmaskTable(double w, int64_t keys, Real* m, Real* dm) {
  for (int64_t d = 0; d < keys; ++d) {
    if (std::isinf(w)) {
      m[d] = 1;
      dm[d] = 0;
      continue;
    }
    const double x = std::numbers::pi * static_cast<double>(d) / w;
    const bool inside = static_cast<double>(d) < w;
    m[d] = inside ? static_cast<Real>(0.5 * (std::cos(x) + 1.0)) : Real(0);
    dm[d] = inside ? static_cast<Real>(std::numbers::pi * d / (2.0 * w * w) * std::sin(x)) : Real(0);
  }
}

}  // namespace multiscreen::kernels::cpu
