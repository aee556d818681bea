// The output gate (spec step 12): ĝ = tanh(SiLU(g)), SiLU(x) = x·σ(x), elementwise.
#pragma once

#include <cmath>

namespace multiscreen::kernels::cpu {

// ĝ for one gate pre-activation g.
template <typename Real>
inline Real GateForward(Real g) {
  const Real sig = Real(1) / (Real(1) + std::exp(-g));
  return std::tanh(g * sig);
}

// dĝ/dg = (1 − ĝ²) · σ(g) · (1 + g (1 − σ(g))).
template <typename Real>
inline Real GateDerivative(Real g) {
  const Real sig = Real(1) / (Real(1) + std::exp(-g));
  const Real t = std::tanh(g * sig);
  return (Real(1) - t * t) * sig * (Real(1) + g * (Real(1) - sig));
}

}  // namespace multiscreen::kernels::cpu
