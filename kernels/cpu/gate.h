// The output gate (spec step 12): ĝ = tanh(SiLU(g)), SiLU(x) = x·σ(x), elementwise.
// fp32 uses the vectorizable ExpFast/TanhFast (kernels/cpu/simd.h), fp64 the library's.
#pragma once

#include "kernels/cpu/simd.h"

namespace multiscreen::kernels::cpu {

// ĝ for one gate pre-activation g.
template <typename Real>
inline Real GateForward(Real g) {
  const Real sig = Real(1) / (Real(1) + ExpFast(-g));
  return TanhFast(g * sig);
}

// dĝ/dg = (1 − ĝ²) · σ(g) · (1 + g (1 − σ(g))).
template <typename Real>
inline Real GateDerivative(Real g) {
  const Real sig = Real(1) / (Real(1) + ExpFast(-g));
  const Real t = TanhFast(g * sig);
  return (Real(1) - t * t) * sig * (Real(1) + g * (Real(1) - sig));
}

// Both at once (one exp and one tanh): *gate = ĝ, *derivative = dĝ/dg.
template <typename Real>
inline void GateForwardAndDerivative(Real g, Real* gate, Real* derivative) {
  const Real sig = Real(1) / (Real(1) + ExpFast(-g));
  const Real t = TanhFast(g * sig);
  *gate = t;
  *derivative = (Real(1) - t * t) * sig * (Real(1) + g * (Real(1) - sig));
}

}  // namespace multiscreen::kernels::cpu
