// Causal attention of the Transformer baseline (spec "Transformer baseline"), exact, one
// of the mechanisms of AttentionKind (kernels/attention_kind.h; the paper's controlled
// comparison, Tables 7–8). Per sequence b and head h, for each query i and key j ≤ i:
//   z_ij = c_i · q_i · k_j,   c_i = scale_h (SSMax: scale_h · log n_i),   n_i = i + 1,
//   o_i = Σ_j p_ij v_j,
// scale_h is the model's (1/√d_h, or QKNorm's e^{s_QK}; SSMax: times its learned s_h,
// see model/transformer.h), applied before each mechanism. The weights p_ij per kind:
//   kSoftmax   p_ij = e^{z_ij} / Σ_k e^{z_ik}.
//   kSoftmax1  "softmax + 1" (E. Miller 2023, "Attention is off by one"):
//              p_ij = e^{z_ij} / (1 + Σ_k e^{z_ik}); the weights may sum to less than 1
//              (a virtual key of score 0 and value 0).
//   kSsmax     Scalable-Softmax (K. M. Nakanishi 2025, "Scalable-Softmax Is Superior for
//              Attention", arXiv 2501.19399): softmax of s_h · log n · z with n the input
//              size; causal, a query sees n_i = i + 1 keys, so the score multiplier is
//              log n_i (query 0: log 1 = 0, a single key, weight 1 whatever the score).
//   kSigmoid   sigmoid attention (J. Ramapuram et al. 2024, "Theory, Analysis, and Best
//              Practices for Sigmoid Self-Attention", arXiv 2409.04431):
//              p_ij = σ(z_ij + b_i), no normalization, b_i = −log n with n the shape's
//              sigmoid_bias_length for every query (the paper's b = −log(sequence
//              length); its causal-LM configuration sets one constant, −ln 2048, the
//              training length: apple/ml-sigmoid-attention), or, with
//              sigmoid_bias_length 0, n_i = i + 1, the keys query i sees (a per-query
//              form, model switch `sigmoid_bias: PER_QUERY`; docs/attention.md).
//   kEntmax15  1.5-entmax (B. Peters, V. Niculae, A. F. T. Martins 2019, "Sparse
//              Sequence-to-Sequence Models", ACL): p = [(α−1) z − τ]_+^{1/(α−1)} with
//              α = 1.5, i.e. p_ij = max(0, z_ij/2 − τ_i)², τ_i the one threshold with
//              Σ_j p_ij = 1, found exactly by sorting the row (exact zeros below it).
// Softmax, softmax1 and SSMax go in blocks of kAttentionBlock queries and keys with an
// online softmax (a thread holds one (b, h) pair and one block of scores, never [T, T]);
// sigmoid needs no normalizer; entmax sorts each query's whole row of ≤ T scores.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/attention_kind.h"

namespace multiscreen::kernels::cpu {

inline constexpr int64_t kAttentionBlock = 64;

// B sequences of T tokens, `heads` heads of width d_h, mechanism `kind`. q, k, v, o (and
// their gradients) are [B·T, heads·d_h] row-major: row b·T + t, columns h·d_h .. (h+1)·d_h.
struct AttentionShape {
  int64_t batch = 0, seq = 0, heads = 0, d_h = 0;
  AttentionKind kind = AttentionKind::kSoftmax;
  // Sigmoid's n in b = −log n: > 0 the same n for every query (the model's training
  // length at training, the evaluation's choice at inference: model/tile_weights.h
  // SigmoidBiasLength); 0 the per-query n_i = i + 1. Other kinds ignore it.
  int64_t sigmoid_bias_length = 0;
};

// Sigmoid's bias b_i of query position i (0-based): −log(bias_length) when bias_length > 0,
// else −log(i + 1).
inline double SigmoidBias(int64_t bias_length, int64_t i) {
  return -std::log(double(bias_length > 0 ? bias_length : i + 1));
}

// The score multiplier's length factor of query position i (0-based): log n_i = log(i + 1)
// for SSMax, 1 otherwise.
inline double AttentionLengthFactor(AttentionKind kind, int64_t i) {
  return kind == AttentionKind::kSsmax ? std::log(double(i + 1)) : 1.0;
}

// o written; stat [B, heads, T] written (fp64), the row statistic the backward recomputes
// p from: softmax, SSMax: lse_i = log Σ_j e^{z_ij}; softmax1: log(1 + Σ_j e^{z_ij});
// entmax: τ_i; sigmoid: its bias b_i (SigmoidBias). scale: [heads] host.
template <typename Real>
void AttentionForward(const AttentionShape& shape, const Real* q, const Real* k, const Real* v, const double* scale,
                      Real* o, double* stat);

// From do = ∂L/∂o: dq, dk, dv written (not accumulated); d_scale [heads] host written,
// ∂L/∂scale_h = Σ_{b,i,j} ∂L/∂z_ij · z_ij/scale_h (fp64). o and stat are the forward's.
// ∂L/∂z_ij from dp_ij = do_i · v_j:
//   softmax, softmax1, SSMax: p_ij (dp_ij − do_i · o_i);
//   sigmoid: dp_ij p_ij (1 − p_ij);
//   entmax 1.5 (Peters et al. 2019, §3.2, g = p^{2−α} = √p):
//     g_ij (dp_ij − Σ_k g_ik dp_ik / Σ_k g_ik)   [no factor ½: d/dz (z/2 − τ)² = z/2 − τ].
template <typename Real>
void AttentionBackward(const AttentionShape& shape, const Real* q, const Real* k, const Real* v, const Real* o,
                       const double* stat, const Real* d_o, const double* scale, Real* dq, Real* dk, Real* dv,
                       double* d_scale);

// The 1.5-entmax threshold τ of the n scores y = z/2 (Σ max(0, y_j − τ)² = 1), exact: the
// scores sorted in decreasing order u_1 ≥ … ≥ u_n, τ = τ_k* for the largest support size k
// with τ_k ≤ u_k, where τ_k = M_k − √((1 − k (S2_k/k − M_k²))/k) (M_k, S2_k: mean, sum of
// squares of u_1..u_k). `work` has room for n doubles (overwritten). Used by the kernels
// and the decoder (model/transformer_decode.cc).
double Entmax15Threshold(const double* y, int64_t n, double* work);

// The weights p[0, n) of one query that sees n keys (n_i = n) from its scores z[0, n)
// (z = c·q·k, the length factor of SSMax already in c), by `kind`: the forward's map, one
// query at a time (the decoder's, model/transformer_decode.cc). sigmoid_bias: sigmoid's b
// of this query (SigmoidBias), ignored by the other kinds. work: n doubles.
void AttentionWeights(AttentionKind kind, const double* z, int64_t n, double sigmoid_bias, double* p, double* work);

}  // namespace multiscreen::kernels::cpu
