// The output gate (spec step 12): ĝ = tanh(SiLU(g)), SiLU(x) = x·σ(x), elementwise.
// fp32 uses the vectorizable ExpCore (kernels/cpu/simd.h) in SigmoidAndGate, fp64 the library's.
#pragma once

#include "kernels/cpu/simd.h"

namespace multiscreen::kernels::cpu {

// σ(g) and ĝ = tanh(g·σ(g)) for one g.
// fp32: the steps of σ = 1/(1 + ExpFast(−g)) and TanhFast(g·σ) with what this argument
// range makes unnecessary left out, for `#pragma omp simd` loops. SiLU(g) ≥ −0.2785 for
// finite g, so tanh's argument x reaches |x| ≥ 0.625 (TanhFast's 1 − 2/(e^{2x} + 1)
// branch) only where x > 0 or x = −∞ (g = −∞), and that formula is exact in sign for
// both: TanhFast's sign flip is not needed. Each exp's argument is clamped once, as
// ExpFast clamps it, without ExpFast's two further tests (below −87.34 the clamped
// e^{−87.34} gives the same σ = 1, and NaN is tested once, at the end). The values are
// those of the composition (the screening tests check them against fp64 to 4e-7, at ±∞,
// the clamps and NaN too); about a fifth fewer vector operations than the composition.
// fp64: std::exp and std::tanh.
inline void SigmoidAndGate(float g, float* sig, float* gate) {
  constexpr float kLo = -87.33654f, kHi = 88.7f;  // ExpFast's clamps
  const float ng = -g;
  const float a = ng < kLo ? kLo : (ng > kHi ? kHi : ng);
  const float s = 1.0f / (1.0f + ExpCore<float, int32_t>(a));
  const float x = g * s;
  const float ax = x < 0 ? -x : x;
  const float z = x * x;
  const float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z +
                        1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
  const float x2 = 2.0f * x;
  const float b = x2 < kLo ? kLo : (x2 > kHi ? kHi : x2);
  const float big = 1.0f - 2.0f / (ExpCore<float, int32_t>(b) + 1.0f);
  const float t = ax < 0.625f ? small : big;
  *sig = s;
  *gate = g == g ? t : g;  // NaN stays NaN
}
inline void SigmoidAndGate(double g, double* sig, double* gate) {
  *sig = 1.0 / (1.0 + std::exp(-g));
  *gate = std::tanh(g * *sig);
}

// ĝ for one gate pre-activation g.
template <typename Real>
inline Real GateForward(Real g) {
  Real sig, t;
  SigmoidAndGate(g, &sig, &t);
  return t;
}

// dĝ/dg = (1 − ĝ²) · σ(g) · (1 + g (1 − σ(g))).
template <typename Real>
inline Real GateDerivative(Real g) {
  Real sig, t;
  SigmoidAndGate(g, &sig, &t);
  return (Real(1) - t * t) * sig * (Real(1) + g * (Real(1) - sig));
}

// Both at once (one sigmoid and one tanh): *gate = ĝ, *derivative = dĝ/dg.
template <typename Real>
inline void GateForwardAndDerivative(Real g, Real* gate, Real* derivative) {
  Real sig, t;
  SigmoidAndGate(g, &sig, &t);
  *gate = t;
  *derivative = (Real(1) - t * t) * sig * (Real(1) + g * (Real(1) - sig));
}

}  // namespace multiscreen::kernels::cpu
