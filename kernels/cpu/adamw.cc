#include "kernels/cpu/adamw.h"

#include <cmath>

namespace multiscreen::kernels::cpu {

template <typename Real>
void AdamWUpdate(const AdamWArgs& args, Real* params, const Real* grads, Real* m_in, Real* v_in, int64_t n) {
  const double bias1 = 1.0 - std::pow(args.beta1, double(args.step));
  const double bias2 = 1.0 - std::pow(args.beta2, double(args.step));
  const Real step_size = static_cast<Real>(args.lr / bias1);
  const Real bias2_sqrt = static_cast<Real>(std::sqrt(bias2));
  const Real decay_factor = static_cast<Real>(1.0 - args.lr * args.weight_decay);
  const Real b1 = static_cast<Real>(args.beta1), b2 = static_cast<Real>(args.beta2);
  const Real one_minus_b1 = static_cast<Real>(1.0 - args.beta1), one_minus_b2 = static_cast<Real>(1.0 - args.beta2);
  const Real eps = static_cast<Real>(args.eps);
  const bool decays = args.weight_decay != 0.0;
  const uint8_t* decay = args.decay;
  Real* __restrict m = m_in;
  Real* __restrict v = v_in;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    Real p = params[i];
    if (decays && (decay == nullptr || decay[i] != 0)) p *= decay_factor;
    const Real g = grads[i];
    m[i] = m[i] * b1 + g * one_minus_b1;
    v[i] = v[i] * b2 + g * g * one_minus_b2;
    const Real denom = std::sqrt(v[i]) / bias2_sqrt + eps;
    params[i] = p - step_size * (m[i] / denom);
  }
}

template void AdamWUpdate<float>(const AdamWArgs&, float*, const float*, float*, float*, int64_t);
template void AdamWUpdate<double>(const AdamWArgs&, double*, const double*, double*, double*, int64_t);

}  // namespace multiscreen::kernels::cpu
