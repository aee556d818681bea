// RMSNorm (spec "Transformer baseline": pre-norm, gain only, no bias), row-wise:
//   y = g ⊙ x / √(mean(x²) + ε),  ε = kRmsNormEps.
// Also the baseline's final norm, which has no gain (g = null).
#pragma once

#include <cstdint>

namespace multiscreen::kernels::cpu {

// ε inside the root (LLaMA's 1e-6).
inline constexpr double kRmsNormEps = 1e-6;

// x: [rows, d] read.  gain: [d] or null (no gain).  y: [rows, d] written (may alias x).
// rstd: [rows] written, 1/√(mean(x²) + ε) per row (the backward's saved statistic).
template <typename Real>
void RmsNormForward(const Real* x, const Real* gain, Real* y, Real* rstd, int64_t rows, int64_t d);

// Backward of RmsNormForward from its input x and rstd. With x̂ = x·rstd, ĝ = dy ⊙ g:
//   dx = rstd · (ĝ − x̂ · mean(ĝ ⊙ x̂))  written (accumulate false) or added (true);
//   dgain[c] += Σ_r dy[r, c] · x̂[r, c]  (when gain and dgain are non-null).
// dx must not alias x or dy.
template <typename Real>
void RmsNormBackward(const Real* x, const Real* gain, const Real* rstd, const Real* dy, Real* dx, Real* dgain,
                     int64_t rows, int64_t d, bool accumulate);

}  // namespace multiscreen::kernels::cpu
