// The fused AdamW kernel (adamw.h): a grid-stride loop, one parameter per step.
#include "kernels/cuda/adamw.h"

#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"

namespace multiscreen::kernels::cuda {
namespace {

// The fp32 constants of one step, as trainer/adamw.cc derives them.
struct StepConstants {
  float step_size, bias2_sqrt, decay_factor, b1, b2, one_minus_b1, one_minus_b2, eps;
  bool decays;
};

__global__ void AdamWKernel(StepConstants k, const uint8_t* decay, float* params, const float* grads, float* m,
                            float* v, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float p = params[i];
    if (k.decays && (decay == nullptr || decay[i] != 0)) p = __fmul_rn(p, k.decay_factor);
    const float g = grads[i];
    const float mi = __fadd_rn(__fmul_rn(m[i], k.b1), __fmul_rn(g, k.one_minus_b1));
    const float vi = __fadd_rn(__fmul_rn(v[i], k.b2), __fmul_rn(__fmul_rn(g, g), k.one_minus_b2));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), k.bias2_sqrt), k.eps);
    params[i] = __fsub_rn(p, __fmul_rn(k.step_size, __fdiv_rn(mi, denom)));
  }
}

}  // namespace

void AdamW(const AdamWArgs& args, float* params, const float* grads, float* m, float* v, int64_t n,
           cudaStream_t stream) {
  if (n <= 0) return;
  const double bias1 = 1.0 - std::pow(args.beta1, double(args.step));
  const double bias2 = 1.0 - std::pow(args.beta2, double(args.step));
  StepConstants k;
  k.step_size = static_cast<float>(args.lr / bias1);
  k.bias2_sqrt = static_cast<float>(std::sqrt(bias2));
  k.decay_factor = static_cast<float>(1.0 - args.lr * args.weight_decay);
  k.b1 = static_cast<float>(args.beta1);
  k.b2 = static_cast<float>(args.beta2);
  k.one_minus_b1 = static_cast<float>(1.0 - args.beta1);
  k.one_minus_b2 = static_cast<float>(1.0 - args.beta2);
  k.eps = static_cast<float>(args.eps);
  k.decays = args.weight_decay != 0.0;
  Launch<AdamWKernel>(BlocksFor(n), kThreads, 0, stream, k, args.decay, params, grads, m, v, n);
  MS_CUDA_CHECK_LAUNCH("AdamW");
}

}  // namespace multiscreen::kernels::cuda
