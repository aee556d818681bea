#include "trainer/adamw.h"

#include <cmath>

namespace multiscreen {

AdamW::AdamW(int64_t size, AdamWHyper hyper, std::vector<uint8_t> decay)
    : hyper_(hyper), decay_(std::move(decay)), m_(size, 0.f), v_(size, 0.f) {}

void AdamW::Step(float* params, const float* grads, double lr) {
  ++step_;
  const double bias1 = 1.0 - std::pow(hyper_.beta1, double(step_));
  const double bias2 = 1.0 - std::pow(hyper_.beta2, double(step_));
  const float step_size = static_cast<float>(lr / bias1);
  const float bias2_sqrt = static_cast<float>(std::sqrt(bias2));
  const float decay_factor = static_cast<float>(1.0 - lr * hyper_.weight_decay);
  const float b1 = static_cast<float>(hyper_.beta1), b2 = static_cast<float>(hyper_.beta2);
  const float one_minus_b1 = static_cast<float>(1.0 - hyper_.beta1), one_minus_b2 = static_cast<float>(1.0 - hyper_.beta2);
  const float eps = static_cast<float>(hyper_.eps);
  const int64_t n = size();
  const bool decays = hyper_.weight_decay != 0.0;
  const uint8_t* decay = decay_.empty() ? nullptr : decay_.data();
  float* __restrict m = m_.data();
  float* __restrict v = v_.data();
  // Memory-bound (28 bytes per parameter): vectorized, both moments in one pass.
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float p = params[i];
    if (decays && (decay == nullptr || decay[i] != 0)) p *= decay_factor;
    const float g = grads[i];
    m[i] = m[i] * b1 + g * one_minus_b1;
    v[i] = v[i] * b2 + g * g * one_minus_b2;
    const float denom = std::sqrt(v[i]) / bias2_sqrt + eps;
    params[i] = p - step_size * (m[i] / denom);
  }
}

}  // namespace multiscreen
