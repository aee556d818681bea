// Causal softmax attention (spec "Transformer baseline"), exact, blocked flash-style:
// per sequence b and head h, for each query i,
//   s_ij = scale_h · q_i · k_j  (j ≤ i),   p_ij = softmax_j(s_ij),   o_i = Σ_j p_ij v_j.
// Queries and keys go in blocks of kAttentionBlock; a thread holds one (b, h) pair and
// at most one block of scores at a time (online softmax), never a [T, T] map. The
// forward saves lse_i = log Σ_j exp s_ij; the backward recomputes p from it.
#pragma once

#include <cstdint>

namespace multiscreen::kernels::cpu {

inline constexpr int64_t kAttentionBlock = 64;

// B sequences of T tokens, `heads` heads of width d_h. q, k, v, o (and their
// gradients) are [B·T, heads·d_h] row-major: row b·T + t, columns h·d_h .. (h+1)·d_h.
struct AttentionShape {
  int64_t batch = 0, seq = 0, heads = 0, d_h = 0;
};

// o written; lse [B, heads, T] written (fp64). scale: [heads] host (1/√d_h, or QKNorm's e^{s_QK}).
template <typename Real>
void AttentionForward(const AttentionShape& shape, const Real* q, const Real* k, const Real* v, const double* scale,
                      Real* o, double* lse);

// From do = ∂L/∂o: dq, dk, dv written (not accumulated); d_scale [heads] host written,
// ∂L/∂scale_h = Σ_{b,i,j} ∂L/∂s_ij · q_i·k_j (fp64). o and lse are the forward's.
template <typename Real>
void AttentionBackward(const AttentionShape& shape, const Real* q, const Real* k, const Real* v, const Real* o,
                       const double* lse, const Real* d_o, const double* scale, Real* dq, Real* dk, Real* dv,
                       double* d_scale);

}  // namespace multiscreen::kernels::cpu
