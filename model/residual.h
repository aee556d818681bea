// The residual add of a layer's output (spec step 2: x ← x + Δ; the Transformer's
// x ← x + o·W_O and x ← x + FFN(x)) and its backward twin (∂L/∂x ← ∂L/∂x + ∂P·W_catᵀ),
// where the product is split over the tp group: each rank holds its tiles' (heads',
// hidden units') part. One definition for both model families and both directions.
#pragma once

#include <cstdint>

#include "kernels/communicator.h"
#include "kernels/device_array.h"
#include "kernels/kernel_table.h"

namespace multiscreen {

// x [rows, n] += Σ_tp-ranks op(A)·op(B) (op(A) [rows, k], op(B) [k, n], row-major, as
// KernelTable::GemmBothPacked: B a weight packed once per step, A an activation or
// gradient packed once per micro-batch; all on the table's device). One rank: the GEMM
// adds into x itself (β = 1: one launch, no pass over a scratch). Several: the part is
// formed in `scratch` (resized to [rows, n]), summed over `tp`, then added to x. The two
// differ in rounding only (the sum's order); every layout is compared against one
// process within tolerance.
template <typename Real>
void AddProductAcrossTp(kernels::KernelTable<Real>& ops, Communicator& tp, bool trans_a, bool trans_b, int64_t rows,
                        int64_t n, int64_t k, const kernels::PackedOperand<Real>& a, int64_t lda,
                        const kernels::PackedOperand<Real>& b, int64_t ldb, DeviceArray<Real>& scratch, Real* x) {
  if (tp.size() == 1) {
    ops.GemmBothPacked(trans_a, trans_b, rows, n, k, 1, a, lda, b, ldb, 1, x, n);
    return;
  }
  scratch.Resize(rows * n);
  ops.GemmBothPacked(trans_a, trans_b, rows, n, k, 1, a, lda, b, ldb, 0, scratch.data(), n);
  tp.AllReduce(scratch.data(), rows * n, ReduceOp::kSum);
  ops.AddInto(scratch.data(), rows * n, x);
}

}  // namespace multiscreen
