// The attention kernels' per-query device functions (attention.h), shared by the
// forward's and backward's kernels (attention.cu) and the decoder's (attention_decode.cu):
// a warp holds one row of a head, lane l its columns l, l + 32, … in fp64; each score is a
// fixed-order warp sum; the mechanism's score → weight map (kernels/cpu/attention.h, as
// the CPU's kernels/cpu/attention.cc); and one query's whole output over its keys.
#pragma once

#include <math_constants.h>

#include <cstdint>

#include "kernels/attention_kind.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/device_math.cuh"

namespace multiscreen::kernels::cuda::attention_row {

constexpr int kWarp = 32;
constexpr int kPerLane = int(kMaxHeadWidth) / kWarp;  // columns per lane, at most

// x[u] ← row[lane + 32u] (0 past d_h), as fp64.
__device__ inline void LoadRow(const float* row, int64_t dh, double* x) {
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) {
    const int64_t c = threadIdx.x + int64_t(u) * kWarp;
    x[u] = c < dh ? double(row[c]) : 0.0;
  }
}

// Σ_c x[c] · row[c] over the warp (every lane gets it).
__device__ inline double WarpDot(const double* x, const float* row, int64_t dh) {
  double part = 0;
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) {
    const int64_t c = threadIdx.x + int64_t(u) * kWarp;
    if (c < dh) part += x[u] * double(row[c]);
  }
  return WarpSumDouble(part);
}

// row[lane + 32u] ← x[u] (below d_h).
__device__ inline void StoreRow(const double* x, int64_t dh, float* row) {
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) {
    const int64_t c = threadIdx.x + int64_t(u) * kWarp;
    if (c < dh) row[c] = static_cast<float>(x[u]);
  }
}

// The mechanism's switches (kernels/cpu/attention.h), as the CPU's kernels/cpu/attention.cc.
__device__ inline bool SoftmaxLike(AttentionKind kind) {
  return kind == AttentionKind::kSoftmax || kind == AttentionKind::kSoftmax1 || kind == AttentionKind::kSsmax;
}

// SSMax's length factor log n_i of query position t, 1 for the others.
__device__ inline double LengthFactor(AttentionKind kind, int64_t t) {
  return kind == AttentionKind::kSsmax ? log(double(t + 1)) : 1.0;
}

__device__ inline double SigmoidOf(double x) {
  if (x >= 0) return 1.0 / (1.0 + exp(-x));
  const double e = exp(x);
  return e / (1.0 + e);
}

// Sigmoid's bias b_t of query position t: −log(bias_length) when bias_length > 0, else
// −log(t + 1) (cpu::SigmoidBias).
__device__ inline double SigmoidBiasOf(int64_t bias_length, int64_t t) {
  return -log(double(bias_length > 0 ? bias_length : t + 1));
}

// p_ij from z_ij and the row statistic (lse, entmax's τ, or sigmoid's bias b_i).
__device__ inline double Weight(AttentionKind kind, double z, double stat) {
  if (SoftmaxLike(kind)) return exp(z - stat);
  if (kind == AttentionKind::kSigmoid) return SigmoidOf(z + stat);
  const double t = 0.5 * z - stat;  // entmax 1.5
  return t > 0 ? t * t : 0.0;
}

// ∂L/∂z_ij from p_ij, dp_ij and the row's D_i.
__device__ inline double ScoreGrad(AttentionKind kind, double p, double dp, double d) {
  if (SoftmaxLike(kind)) return p * (dp - d);
  if (kind == AttentionKind::kSigmoid) return dp * p * (1.0 - p);
  return sqrt(p) * (dp - d);  // entmax 1.5: √p (dp − Σ√p dp / Σ√p)
}

// Entmax 1.5's τ of query t (Σ_j max(0, z_j/2 − τ)² = 1, z_j = sc q·k_j): bisection on
// [max − 1, max] of y = z/2 for the support, then τ exactly from the support's sums
// (the CPU's Entmax15Threshold sorts instead).
__device__ inline double EntmaxThreshold(const double* qi, const float* k, int64_t base, int64_t t, int64_t ld, int64_t dh,
                                  double sc) {
  double y_max = -CUDART_INF;
  for (int64_t j = 0; j <= t; ++j) y_max = fmax(y_max, 0.5 * sc * WarpDot(qi, k + base + j * ld, dh));
  double lo = y_max - 1.0, hi = y_max;
  for (int it = 0; it < 60; ++it) {
    const double mid = 0.5 * (lo + hi);
    double mass = 0;
    for (int64_t j = 0; j <= t; ++j) {
      const double d = 0.5 * sc * WarpDot(qi, k + base + j * ld, dh) - mid;
      if (d > 0) mass += d * d;
    }
    if (mass > 1) lo = mid; else hi = mid;
  }
  double s1 = 0, s2 = 0, n = 0;
  for (int64_t j = 0; j <= t; ++j) {
    const double y = 0.5 * sc * WarpDot(qi, k + base + j * ld, dh);
    if (y > lo) s1 += y, s2 += y * y, n += 1;
  }
  const double mean = s1 / n, delta = (1.0 - (s2 - n * mean * mean)) / n;
  return mean - sqrt(fmax(delta, 0.0));
}

// One query's output over keys 0..t of its (b, h) pair (rows base + j·ld of k and v),
// held by a warp: the weights of the scores sc · q·k_j (an online softmax for the softmax
// kinds), acc[u] ← o's columns lane + 32u, and the row statistic (lse, entmax's τ, or
// sigmoid's bias, of sigmoid_bias_length: SigmoidBiasOf) returned. The forward's query
// (attention.cu) and the decoder's (attention_decode.cu).
__device__ inline double AttendQuery(const double* qi, const float* k, const float* v, int64_t base, int64_t t,
                                     int64_t ld, int64_t dh, double sc, AttentionKind kind, int64_t sigmoid_bias_length,
                                     double* acc) {
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) acc[u] = 0;
  if (!SoftmaxLike(kind)) {  // sigmoid, entmax: each weight on its own, no rescaling
    const double stat = kind == AttentionKind::kEntmax15 ? EntmaxThreshold(qi, k, base, t, ld, dh, sc)
                                                         : SigmoidBiasOf(sigmoid_bias_length, t);
    for (int64_t j = 0; j <= t; ++j) {
      const double p = Weight(kind, sc * WarpDot(qi, k + base + j * ld, dh), stat);
      const float* vj = v + base + j * ld;
#pragma unroll
      for (int u = 0; u < kPerLane; ++u) {
        const int64_t c = threadIdx.x + int64_t(u) * kWarp;
        if (c < dh) acc[u] += p * double(vj[c]);
      }
    }
    return stat;
  }
  // softmax1's extra e^0 in the denominator: the running max and sum start at 0 and 1.
  double m = kind == AttentionKind::kSoftmax1 ? 0.0 : -CUDART_INF, l = kind == AttentionKind::kSoftmax1 ? 1.0 : 0.0;
  for (int64_t j = 0; j <= t; ++j) {
    const double s = sc * WarpDot(qi, k + base + j * ld, dh);
    const double m_new = fmax(m, s), rescale = exp(m - m_new), p = exp(s - m_new);
    l = l * rescale + p;
    const float* vj = v + base + j * ld;
#pragma unroll
    for (int u = 0; u < kPerLane; ++u) {
      const int64_t c = threadIdx.x + int64_t(u) * kWarp;
      acc[u] = acc[u] * rescale + (c < dh ? p * double(vj[c]) : 0.0);
    }
    m = m_new;
  }
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) acc[u] /= l;
  return m + log(l);
}

}  // namespace multiscreen::kernels::cuda::attention_row
