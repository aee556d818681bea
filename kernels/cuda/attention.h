// Causal attention (spec "Transformer baseline") on a CUDA device, the twin of
// kernels/cpu/attention.h, every mechanism of AttentionKind (shape.kind: softmax,
// softmax1, SSMax, sigmoid, entmax 1.5; definitions there): per sequence b, head h and
// query i, z_ij = c_i · q_i·k_j (j ≤ i), p_ij by the kind, o_i = Σ_j p_ij v_j,
// exact (no window), with the row statistic (lse, or entmax's τ found by bisection for
// the support and then exactly from it) saved for the backward, which recomputes p. The project's own simple kernel, written to be obviously
// correct: one warp per query (forward, ∂q) or per key (∂k, ∂v), lanes over the head's
// columns, an online softmax over the keys one at a time, scores and sums in fp64 as
// the CPU's. No atomics: every output has one owner, and ∂scale_h sums per-query parts
// in a fixed order, so results are deterministic. Not fast (no tiling, no tensor
// cores): kernels/cuda/attention_tiled.h is the fast softmax kernel, and this one its
// oracle.
//
// q, k, v, o and their gradients are device [B·T, heads·d_h] (row b·T + t, columns
// h·d_h ..); scale, lse and d_scale are host arrays (kernels/transformer_kernels.h),
// copied through the scratch here; the calls that return them wait for them. d_h up to
// kMaxHeadWidth (more is fatal, one line). Launches on `stream`; failures are fatal.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cpu/attention.h"
#include "kernels/device_array.h"

namespace multiscreen::kernels::cuda {

// The widest head the kernels take (each lane holds d_h/32 columns in registers).
inline constexpr int64_t kMaxHeadWidth = 256;

// Device staging of the host arrays and the backward's per-query values, grown and kept.
struct AttentionScratch {
  DeviceArray<double> scale{Device::kCuda};    // [heads]
  DeviceArray<double> lse{Device::kCuda};      // [B, heads, T]
  DeviceArray<double> delta{Device::kCuda};    // [B, heads, T]: D_i (∂L/∂o_i · o_i; entmax: Σ√p dp / Σ√p)
  DeviceArray<double> parts{Device::kCuda};    // [B, heads, T]: Σ_j ∂L/∂s_ij · q_i·k_j
  DeviceArray<double> d_scale{Device::kCuda};  // [heads]
};

// o written; lse [B, heads, T] host written. scale: [heads] host.
void AttentionForward(const cpu::AttentionShape& shape, const float* q, const float* k, const float* v,
                      const double* scale, float* o, double* lse, AttentionScratch* scratch, cudaStream_t stream);

// From d_o: dq, dk, dv written (not accumulated); d_scale [heads] host written,
// ∂L/∂scale_h = Σ_{b,i,j} ∂L/∂s_ij · q_i·k_j. o and lse (host) are the forward's.
void AttentionBackward(const cpu::AttentionShape& shape, const float* q, const float* k, const float* v,
                       const float* o, const double* lse, const float* d_o, const double* scale, float* dq, float* dk,
                       float* dv, double* d_scale, AttentionScratch* scratch, cudaStream_t stream);

// The backward's uploads and its last pass, which the tiled backward (attention_tiled.h)
// runs around its own. Begin: scale and lse uploaded to scratch->scale and scratch->lse;
// scratch->delta, parts and d_scale sized. Returns false when there are no rows (d_scale
// then zeroed; nothing to do). Finish: d_scale [heads] host written, Σ over (b, i) of
// scratch->parts in a fixed order; waits.
bool AttentionBackwardBegin(const cpu::AttentionShape& shape, const double* lse, const double* scale,
                            double* d_scale, AttentionScratch* scratch, cudaStream_t stream);
void AttentionBackwardFinish(const cpu::AttentionShape& shape, double* d_scale, AttentionScratch* scratch,
                             cudaStream_t stream);

}  // namespace multiscreen::kernels::cuda
