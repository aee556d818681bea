// RoPE on a CUDA device (rope.h): a grid-stride loop over the B·T·heads·d_h/2 pairs.
#include "kernels/cuda/rope.h"

#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"

namespace multiscreen::kernels::cuda {
namespace {

constexpr double kTheta = 10000.0;  // cpu::kRopeTheta
constexpr double kTwoPi = 6.283185307179586476925286766559;

// YaRN's scaling as plain numbers (a kernel argument): factor 1 is plain RoPE.
struct Scaling {
  double factor, original_len, alpha, beta;
};

__global__ void RopeKernel(float* x, int64_t ld, int64_t T, int64_t heads, int64_t d_h, int64_t n, double sign,
                           Scaling yarn) {
  const int64_t half = d_h / 2;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = i % half, h = (i / half) % heads, row = i / (half * heads), t = row % T;
    // As cpu::Rope: freq = θ^(−2p/d_h) (YaRN: cpu::RopeFrequencies' ramp), φ = t · freq,
    // cos and sin in fp64, then fp32.
    double freq = pow(kTheta, -2.0 * double(p) / double(d_h));
    if (yarn.factor != 1.0) {
      const double r = yarn.original_len / (kTwoPi / freq);
      const double gamma = fmin(fmax((r - yarn.alpha) / (yarn.beta - yarn.alpha), 0.0), 1.0);
      freq = (1.0 - gamma) * freq / yarn.factor + gamma * freq;
    }
    const double phi = double(t) * freq;
    const float c = static_cast<float>(cos(phi)), s = static_cast<float>(sign * sin(phi));
    float* z = x + row * ld + h * d_h;
    const float a = z[p], b = z[p + half];
    z[p] = a * c - b * s;
    z[p + half] = a * s + b * c;
  }
}

}  // namespace

void Rope(float* x, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t d_h, bool inverse, cudaStream_t stream,
          const cpu::RopeScaling& scaling) {
  const int64_t n = B * T * heads * (d_h / 2);
  if (n <= 0) return;
  const Scaling yarn{scaling.factor, scaling.original_len, scaling.alpha, scaling.beta};
  Launch<RopeKernel>(BlocksFor(n), kThreads, 0, stream, x, ld, T, heads, d_h, n, inverse ? -1.0 : 1.0, yarn);
  MS_CUDA_CHECK_LAUNCH("Rope");
}

}  // namespace multiscreen::kernels::cuda
