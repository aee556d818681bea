// Embedding lookup (spec step 1) on a vocabulary shard: rows [v0, v1) of the
// normalized table Ē; ids outside the shard give zero rows (the tp all-reduce
// completes them).
#pragma once

#include <cstdint>

namespace multiscreen::kernels::cpu {

// out[n, :] = scale · table[ids[n] − v0, :] if v0 ≤ ids[n] < v1, else 0.
//   table: [v1 − v0, d]; ids: [count]; out: [count, d] written.
template <typename Real>
void EmbeddingForward(const Real* table, int64_t v0, int64_t v1, int64_t d, const int32_t* ids,
                      int64_t count, Real scale, Real* out);

// dtable[ids[n] − v0, :] += scale · dout[n, :] for ids in the shard (serial,
// so repeated ids sum in a fixed order).
template <typename Real>
void EmbeddingBackward(const Real* dout, const int32_t* ids, int64_t count, int64_t v0, int64_t v1,
                       int64_t d, Real scale, Real* dtable);

}  // namespace multiscreen::kernels::cpu
