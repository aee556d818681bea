#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/onednn_matmul.h"

namespace multiscreen::kernels::cpu {

namespace {

// Runs block(0 … blocks − 1) on the OpenMP threads, each thread's OpenMP count set to 1 while
// it runs them, so that a BLAS call inside runs single-threaded (OpenBLAS's OpenMP build sizes
// its own threading by omp_get_max_threads()), whatever team OpenMP gives the loop: a team of
// one (OMP_THREAD_LIMIT=1, OMP_DYNAMIC, or a call from inside a parallel region) is not an
// active region, and a threaded OpenBLAS call inside one spun forever.
template <typename Block>
void SingleThreadedBlasBlocks(int64_t blocks, Block block) {
#pragma omp parallel if (blocks > 1)
  {
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < blocks; ++i) block(i);
    omp_set_num_threads(threads);
  }
}

// C[1, n] = alpha · op(A)[1, k] · op(B) + beta · C as matrix-vector products. sgemm
// copies the whole of B into its panels for a single row (OpenBLAS 0.3.21's
// sgemm_itcopy: 25 % of a Ψ = 16 decoder's time, more than the products themselves); a
// decoded token (model/decoder.h: one row per GEMM) now reads each weight once — Ψ = 16
// decodes 5× faster on one core (docs/evaluation.md). k = 0 stays with gemm (gemv returns
// at once without scaling C); beta = 0 clears C first, so that C is never read, as gemm
// promises, whatever the BLAS's gemv makes of 0 · NaN. C's n outputs go in fixed blocks of
// kBlasBlock, one single-threaded gemv each (OpenBLAS's threaded gemv gave other bits on 3
// threads than on 1, 2 or 4): the same bits whatever the thread count.
template <typename Real, typename Gemv>
void RowTimesMatrix(Gemv gemv, bool trans_a, bool trans_b, int64_t n, int64_t k, Real alpha, const Real* a,
                    int64_t lda, const Real* b, int64_t ldb, Real beta, Real* c) {
  if (beta == Real(0)) std::fill(c, c + n, Real(0));
  // op(A)'s one row: contiguous, or A's first column (stored [k, 1], stride lda).
  const int64_t inc_a = trans_a ? lda : 1;
  SingleThreadedBlasBlocks((n + kBlasBlock - 1) / kBlasBlock, [&](int64_t i) {
    const int64_t lo = i * kBlasBlock, len = std::min(kBlasBlock, n - lo);
    if (trans_b) {  // B stored [n, k]: c = alpha · B a, rows lo … lo + len of B
      gemv(CblasRowMajor, CblasNoTrans, len, k, alpha, b + lo * ldb, ldb, a, inc_a, beta, c + lo, 1);
    } else {        // B stored [k, n]: c = alpha · Bᵀ a, columns lo … lo + len of B
      gemv(CblasRowMajor, CblasTrans, k, len, alpha, b + lo, ldb, a, inc_a, beta, c + lo, 1);
    }
  });
}

// C = alpha · op(A) op(B) + beta · C through the BLAS's gemm (cblas_sgemm or cblas_dgemm) as
// fixed blocks of kBlasBlock rows of C (columns where n > m), one single-threaded call each on
// the OpenMP threads (SingleThreadedBlasBlocks), so an element's sums depend on the shape
// alone, not on the thread count.
template <typename Real, typename BlasGemm>
void BlockedBlasGemm(BlasGemm gemm, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, Real alpha,
                     const Real* a, int64_t lda, const Real* b, int64_t ldb, Real beta, Real* c, int64_t ldc) {
  const bool by_rows = m >= n;
  const int64_t total = by_rows ? m : n;
  SingleThreadedBlasBlocks((total + kBlasBlock - 1) / kBlasBlock, [&](int64_t i) {
    const int64_t lo = i * kBlasBlock, len = std::min(kBlasBlock, total - lo);
    const Real* a_i = by_rows ? a + (trans_a ? lo : lo * lda) : a;
    const Real* b_i = by_rows ? b : b + (trans_b ? lo * ldb : lo);
    gemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, by_rows ? len : m,
         by_rows ? n : len, k, alpha, a_i, lda, b_i, ldb, beta, c + (by_rows ? lo * ldc : lo), ldc);
  });
}

}  // namespace

template <>
void Gemm<float>(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                 int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (m == 1 && k > 0) return RowTimesMatrix(cblas_sgemv, trans_a, trans_b, n, k, alpha, a, lda, b, ldb, beta, c);
  // The avx512 path's products through oneDNN's matmul (kernels/cpu/onednn_matmul.h): 73–92 %
  // of the FMA peak on the step's shapes, while OpenBLAS's kernels depend on
  // OPENBLAS_CORETYPE (Haswell: its AVX2 kernels, 32–47 %; docs/performance.md).
  // alpha ≠ 1 as oneDNN's output scale (the head's logits, scaled by e^{s_F}: 42 % of the
  // peak on OpenBLAS's Haswell kernels, tests/kernels/head_bench.cc).
  if (ActiveIsa() == Isa::kAvx512 && k > 0 && std::isfinite(alpha) && alpha != 0.f && (beta == 0.f || beta == 1.f) &&
      OnednnMatmul(MatmulOperands::kF32, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta == 1.f, c, ldc)) {
    return;
  }
  BlockedBlasGemm(cblas_sgemm, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <>
void Gemm<double>(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                  const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
                  int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (m == 1 && k > 0) return RowTimesMatrix(cblas_dgemv, trans_a, trans_b, n, k, alpha, a, lda, b, ldb, beta, c);
  BlockedBlasGemm(cblas_dgemm, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <typename Real>
void MoveAddTransposed(Real* a, int64_t rows, int64_t cols, int64_t lda, Real* b, int64_t ldb) {
  constexpr int64_t kBlock = 64;
#pragma omp parallel for schedule(static)
  for (int64_t j0 = 0; j0 < cols; j0 += kBlock) {
    const int64_t j1 = std::min(cols, j0 + kBlock);
    for (int64_t i0 = 0; i0 < rows; i0 += kBlock) {
      const int64_t i1 = std::min(rows, i0 + kBlock);
      for (int64_t j = j0; j < j1; ++j) {
        for (int64_t i = i0; i < i1; ++i) b[j * ldb + i] += a[i * lda + j];
      }
      for (int64_t i = i0; i < i1; ++i) std::fill(a + i * lda + j0, a + i * lda + j1, Real(0));
    }
  }
}

template void MoveAddTransposed<float>(float*, int64_t, int64_t, int64_t, float*, int64_t);
template void MoveAddTransposed<double>(double*, int64_t, int64_t, int64_t, double*, int64_t);

}  // namespace multiscreen::kernels::cpu
