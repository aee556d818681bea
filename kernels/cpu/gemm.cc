#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>

namespace multiscreen::kernels::cpu {

template <>
void Gemm<float>(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                 int64_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <>
void Gemm<double>(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                  const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
                  int64_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
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
