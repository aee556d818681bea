// Softmax cross-entropy on a chunk of logits over a vocabulary shard (spec
// step 15), split into the local statistics that a tensor-parallel group
// all-reduces and the gradient that follows from the global log-sum-exp.
#pragma once

#include <cstdint>

namespace multiscreen::kernels::cpu {

// Per row r of z [rows, V] (row stride ld): row_max[r] = max_v z[r, v] and
// row_sum[r] = Σ_v exp(z[r, v] − row_max[r]), in fp64.
template <typename Real>
void SoftmaxStats(const Real* z, int64_t ld, int64_t rows, int64_t V, double* row_max, double* row_sum);

// In place: z[r, v] ← (exp(z[r, v] − lse[r]) − [v == target[r]]) · coef[r].
// target[r] is the shard-local column of row r's target, or −1 when the target
// lies in another shard.
template <typename Real>
void CrossEntropyGrad(Real* z, int64_t ld, int64_t rows, int64_t V, const double* lse,
                      const int64_t* target, const Real* coef);

// The softmax's numerators in place, for a head whose vocabulary is not sharded (one
// pass per row while the row is in cache): z[r, v] ← exp(z[r, v] − m_r), where m_r is
// `shift` when that is not NaN (the caller guarantees z ≤ shift and shift < 40, so that
// no exponential leaves fp32's normal range) and the row max otherwise. Writes
// row_scale[r] = 1/Σ_v exp(z[r, v] − m_r) (so the softmax is z · row_scale),
// lse[r] = m_r + log Σ_v exp(z[r, v] − m_r), and target_logit[r] = z[r, target[r]]
// as it was (0 where target[r] < 0).
template <typename Real>
void SoftmaxNumerators(Real* z, int64_t ld, int64_t rows, int64_t V, double shift, const int64_t* target,
                       double* lse, double* target_logit, double* row_scale);

// SoftmaxNumerators for a bf16 head (issue 44): z [rows, V] (row stride ld) is left as it
// is and the numerators go to z16 [rows, V] (row stride ld16) as bf16 bits, FloatToBf16 of
// the fp32 numerator SoftmaxNumerators would write (kernels/cpu/bf16.h), in the same pass
// (one read of z and a half-size write, where SoftmaxNumerators and a conversion after it
// read z twice and write it once). lse, target_logit and row_scale are SoftmaxNumerators'
// (sums of the unrounded numerators), bit for bit.
void SoftmaxNumeratorsBf16(const float* z, int64_t ld, int64_t rows, int64_t V, double shift, const int64_t* target,
                           double* lse, double* target_logit, double* row_scale, uint16_t* z16, int64_t ld16);

}  // namespace multiscreen::kernels::cpu
