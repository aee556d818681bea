// RoPE on a CUDA device (rope.h): grid-stride loops over the pairs (or the table's
// entries), one frequency and angle formula for both.
#include "kernels/cuda/rope.h"

#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"

namespace multiscreen::kernels::cuda {
namespace {

constexpr double kTheta = 10000.0;  // cpu::kRopeTheta
constexpr double kTwoPi = 6.283185307179586476925286766559;

// YaRN's scaling as plain numbers (a kernel argument): factor 1 is plain RoPE. code: the
// authors' code's ramp over the pair index between lo and hi (cpu::YarnCodeRampBounds).
struct Scaling {
  double factor, original_len, alpha, beta;
  bool code;
  double lo, hi;
};

Scaling ScalingOf(const cpu::RopeScaling& scaling, int64_t d_h) {
  Scaling s{scaling.factor, scaling.original_len, scaling.alpha, scaling.beta, false, 0.0, 1.0};
  if (scaling.active() && scaling.ramp == cpu::YarnRamp::kCode) {
    s.code = true;
    cpu::YarnCodeRampBounds(d_h, scaling, &s.lo, &s.hi);
  }
  return s;
}

// cos φ(t, p) and sign · sin φ(t, p) as fp32, from fp64 as cpu::Rope: freq = θ^(−2p/d_h)
// (YaRN: cpu::RopeFrequencies' ramp), φ = t · freq.
__device__ inline void CosSin(int64_t t, int64_t p, int64_t d_h, double sign, const Scaling& yarn, float* c,
                              float* s) {
  double freq = pow(kTheta, -2.0 * double(p) / double(d_h));
  if (yarn.factor != 1.0) {
    const double r = yarn.original_len / (kTwoPi / freq);
    const double gamma = yarn.code ? 1.0 - fmin(fmax((double(p) - yarn.lo) / (yarn.hi - yarn.lo), 0.0), 1.0)
                                   : fmin(fmax((r - yarn.alpha) / (yarn.beta - yarn.alpha), 0.0), 1.0);
    freq = (1.0 - gamma) * freq / yarn.factor + gamma * freq;
  }
  const double phi = double(t) * freq;
  *c = static_cast<float>(cos(phi));
  *s = static_cast<float>(sign * sin(phi));
}

// n pairs per array; pair i of array a (i < n, a < arrays) of x[a] turned into y[a].
struct Operands {
  const float* x[2];
  float* y[2];
};

__global__ void RopeKernel(Operands ops, int arrays, int64_t ld, int64_t T, int64_t heads, int64_t d_h, int64_t n,
                           double sign, Scaling yarn) {
  const int64_t half = d_h / 2;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < arrays * n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int a = static_cast<int>(e / n);
    const int64_t i = e % n;
    const int64_t p = i % half, h = (i / half) % heads, row = i / (half * heads), t = row % T;
    float c, s;
    CosSin(t, p, d_h, sign, yarn, &c, &s);
    const float* z = ops.x[a] + row * ld + h * d_h;
    float* out = ops.y[a] + row * ld + h * d_h;
    const float x0 = z[p], x1 = z[p + half];
    out[p] = x0 * c - x1 * s;
    out[p + half] = x0 * s + x1 * c;
  }
}

__global__ void RopeTableKernel(float* table, int64_t T, int64_t d_h, Scaling yarn) {
  const int64_t half = d_h / 2, n = T * half;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / half, p = i % half;
    CosSin(t, p, d_h, 1.0, yarn, &table[t * d_h + 2 * p], &table[t * d_h + 2 * p + 1]);
  }
}

void Launch2(const Operands& ops, int arrays, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t d_h,
             bool inverse, cudaStream_t stream, const cpu::RopeScaling& scaling) {
  const int64_t n = B * T * heads * (d_h / 2);
  if (n <= 0) return;
  Launch<RopeKernel>(BlocksFor(arrays * n), kThreads, 0, stream, ops, arrays, ld, T, heads, d_h, n,
                     inverse ? -1.0 : 1.0, ScalingOf(scaling, d_h));
  MS_CUDA_CHECK_LAUNCH("Rope");
}

}  // namespace

void Rope(float* x, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t d_h, bool inverse, cudaStream_t stream,
          const cpu::RopeScaling& scaling) {
  Launch2(Operands{{x, nullptr}, {x, nullptr}}, 1, ld, B, T, heads, d_h, inverse, stream, scaling);
}

void RopePair(const float* q, const float* k, float* q_out, float* k_out, int64_t ld, int64_t B, int64_t T,
              int64_t heads, int64_t d_h, bool inverse, cudaStream_t stream, const cpu::RopeScaling& scaling) {
  Launch2(Operands{{q, k}, {q_out, k_out}}, 2, ld, B, T, heads, d_h, inverse, stream, scaling);
}

void RopeTable(float* table, int64_t T, int64_t d_h, cudaStream_t stream, const cpu::RopeScaling& scaling) {
  const int64_t n = T * (d_h / 2);
  if (n <= 0) return;
  Launch<RopeTableKernel>(BlocksFor(n), kThreads, 0, stream, table, T, d_h, ScalingOf(scaling, d_h));
  MS_CUDA_CHECK_LAUNCH("RopeTable");
}

}  // namespace multiscreen::kernels::cuda
