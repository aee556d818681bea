// General matrix multiply, row-major, for fp32 and fp64: the one place that picks the
// library (issue 44). fp32 on the avx512 path (kernels/cpu/isa.h ActiveIsa) with alpha finite
// and nonzero and beta 0 or 1 (every product of the training step): oneDNN's matmul, whose kernels do
// not depend on OPENBLAS_CORETYPE; else OpenBLAS (cblas), and a single row (m = 1) as
// OpenBLAS's gemv. The libraries round differently in the last bits. OpenBLAS's products
// (gemm and gemv) run as fixed blocks of C (kBlasBlock rows or columns), one single-threaded
// call per block on the OpenMP threads, since OpenBLAS's own threading splits a product by
// the thread count and its kernels' sums depend on the split: their bits do not depend on the
// thread count (docs/performance.md, "A quiet sitting"). Nor do oneDNN's (the avx512 path's
// fp32 and bf16 products) but for one kind the step never runs (kernels/cpu/onednn_matmul.h:
// long weight-gradient reductions in fixed chunks, scales applied after where oneDNN's follow
// the thread count; both operands transposed with a small C and a long k still do).
#pragma once

#include <cstdint>

namespace multiscreen::kernels::cpu {

// The rows (or, where C has more columns than rows, the columns) of C in one OpenBLAS call.
inline constexpr int64_t kBlasBlock = 256;

// C[M, N] = alpha · op(A) · op(B) + beta · C, all row-major.
//   op(A) is [M, K] (A stored [K, M] when trans_a), op(B) is [K, N] (B stored
//   [N, K] when trans_b); lda/ldb/ldc are the stored row strides in elements.
// Real: float or double.
template <typename Real>
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, Real alpha, const Real* a,
          int64_t lda, const Real* b, int64_t ldb, Real beta, Real* c, int64_t ldc);

// b[j, i] += a[i, j], then a[i, j] = 0, for a [rows, cols] (row stride lda) and
// b [cols, rows] (ldb); in cache-sized blocks, threaded. (An accumulator emptied
// this way is ready for GEMMs with beta = 1.)
template <typename Real>
void MoveAddTransposed(Real* a, int64_t rows, int64_t cols, int64_t lda, Real* b, int64_t ldb);

}  // namespace multiscreen::kernels::cpu
