#include "trainer/adamw.h"

namespace multiscreen {

AdamW::AdamW(int64_t size, AdamWHyper hyper, std::vector<uint8_t> decay, kernels::KernelTable<float>* ops)
    : hyper_(hyper), ops_(ops) {
  if (ops_ == nullptr) {
    own_ops_ = std::move(*MakeKernelTable<float>(Device::kCpu));  // the CPU's table cannot fail
    ops_ = own_ops_.get();
  }
  const Device device = ops_->device();
  decay_ = DeviceArray<uint8_t>(device);
  m_ = DeviceArray<float>(device);
  v_ = DeviceArray<float>(device);
  m_.Resize(size);  // zero-initialized
  v_.Resize(size);
  if (!decay.empty()) {
    decay_.Resize(static_cast<int64_t>(decay.size()));
    decay_.CopyFromHost(decay.data());
  }
}

kernels::AdamWArgs MakeAdamWArgs(const AdamWHyper& hyper, double lr, int64_t step, const uint8_t* decay) {
  kernels::AdamWArgs args;
  args.lr = lr;
  args.beta1 = hyper.beta1;
  args.beta2 = hyper.beta2;
  args.eps = hyper.eps;
  args.weight_decay = hyper.weight_decay;
  args.step = step;
  args.decay = decay;
  return args;
}

void AdamW::Step(float* params, const float* grads, double lr) {
  ++step_;
  const kernels::AdamWArgs args = MakeAdamWArgs(hyper_, lr, step_, decay_.empty() ? nullptr : decay_.data());
  ops_->AdamW(args, params, grads, m_.data(), v_.data(), size());
}

}  // namespace multiscreen
