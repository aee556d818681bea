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

// Both at once on a vocabulary that is not sharded, one row at a time while the row is
// in cache: lse[r] = log Σ_v exp(z[r, v]), target_logit[r] = z[r, target[r]] (0 when
// target[r] < 0), then z in place as CrossEntropyGrad leaves it.
template <typename Real>
void SoftmaxCrossEntropy(Real* z, int64_t ld, int64_t rows, int64_t V, const int64_t* target, const Real* coef,
                         double* lse, double* target_logit);

}  // namespace multiscreen::kernels::cpu
