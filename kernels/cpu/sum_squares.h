// The sum of squares of a buffer in fp64 (the global gradient norm's part of it, parallel/step.cc
// GlobalGradNorm; CpuKernelTable::SumSquares): threaded, and the same bits whatever the thread
// count and on every instruction-set path.
//
// The order: x is cut into blocks of kSumSquaresBlock elements from its start; within a block,
// element i goes to partial sum i mod 16, and the 16 partial sums are added pairwise (j + 8
// into j, then j + 4, j + 2, j + 1); the blocks' sums are then added to init in block order.
// For float x each square is exact in fp64, so a multiply-add and a multiply then add give the
// same bits, and the paths agree; for double they may differ in the last bits (contraction).
#pragma once

#include <cstdint>

namespace multiscreen::kernels::cpu {

inline constexpr int64_t kSumSquaresBlock = int64_t(1) << 16;

// init + Σ_i x[i]² in the order above. n ≥ 0; x may be null when n = 0.
template <typename Real>
double SumSquaresBlocked(const Real* x, int64_t n, double init);

}  // namespace multiscreen::kernels::cpu
