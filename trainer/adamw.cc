#include "trainer/adamw.h"

#include "kernels/cpu/adamw.h"

namespace multiscreen {

AdamW::AdamW(int64_t size, AdamWHyper hyper, std::vector<uint8_t> decay)
    : hyper_(hyper), decay_(std::move(decay)), m_(size, 0.f), v_(size, 0.f) {}

void AdamW::Step(float* params, const float* grads, double lr) {
  ++step_;
  kernels::AdamWArgs args;
  args.lr = lr;
  args.beta1 = hyper_.beta1;
  args.beta2 = hyper_.beta2;
  args.eps = hyper_.eps;
  args.weight_decay = hyper_.weight_decay;
  args.step = step_;
  args.decay = decay_.empty() ? nullptr : decay_.data();
  kernels::cpu::AdamWUpdate(args, params, grads, m_.data(), v_.data(), size());
}

}  // namespace multiscreen
