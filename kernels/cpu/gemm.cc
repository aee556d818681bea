#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "kernels/cpu/isa.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace multiscreen::kernels::cpu {

namespace {

// C[1, n] = alpha · op(A)[1, k] · op(B) + beta · C as one matrix-vector product. sgemm
// copies the whole of B into its panels for a single row (OpenBLAS 0.3.21's
// sgemm_itcopy: 25 % of a Ψ = 16 decoder's time, more than the products themselves); a
// decoded token (model/decoder.h: one row per GEMM) now reads each weight once — Ψ = 16
// decodes 5× faster on one core (docs/evaluation.md). k = 0 stays with gemm (gemv returns
// at once without scaling C); beta = 0 clears C first, so that C is never read, as gemm
// promises, whatever the BLAS's gemv makes of 0 · NaN.
template <typename Real, typename Gemv>
void RowTimesMatrix(Gemv gemv, bool trans_a, bool trans_b, int64_t n, int64_t k, Real alpha, const Real* a,
                    int64_t lda, const Real* b, int64_t ldb, Real beta, Real* c) {
  if (beta == Real(0)) std::fill(c, c + n, Real(0));
  // op(A)'s one row: contiguous, or A's first column (stored [k, 1], stride lda).
  const int64_t inc_a = trans_a ? lda : 1;
  if (trans_b) {  // B stored [n, k]: c = alpha · B a
    gemv(CblasRowMajor, CblasNoTrans, n, k, alpha, b, ldb, a, inc_a, beta, c, 1);
  } else {        // B stored [k, n]: c = alpha · Bᵀ a
    gemv(CblasRowMajor, CblasTrans, k, n, alpha, b, ldb, a, inc_a, beta, c, 1);
  }
}

// The avx512 path's fp32 products through oneDNN's matmul (issue 44): its kernels are
// chosen by oneDNN from the CPU (brgemm, AVX-512), 73–92 % of the FMA peak on the step's
// shapes, while OpenBLAS's depend on OPENBLAS_CORETYPE (Haswell: its AVX2 kernels, 32–47 %;
// docs/performance.md has the table). oneDNN runs on the OpenMP runtime the kernels use
// (Debian's build links libgomp), so its threads are ours. One primitive per shape, made on
// first use and kept (a step reuses a handful of shapes); safe to call from several threads.
class OnednnMatmuls {
 public:
  // The process's one instance (never destroyed: no exit-order issue), or null where
  // oneDNN has no CPU engine.
  static OnednnMatmuls* Get() {
    static OnednnMatmuls* matmuls = [] {
      try {
        return new OnednnMatmuls;
      } catch (const dnnl::error&) {
        return static_cast<OnednnMatmuls*>(nullptr);
      }
    }();
    return matmuls;
  }

  // C[m, n] = op(A) op(B) (+ C where accumulate), row-major, as Gemm's arguments. False
  // (C untouched) where oneDNN refuses the product: the caller runs it through OpenBLAS.
  bool Run(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
           const float* b, int64_t ldb, bool accumulate, float* c, int64_t ldc) {
    const Key key{trans_a, trans_b, accumulate, m, n, k, lda, ldb, ldc};
    try {  // oneDNN's C++ API throws dnnl::error; nothing leaves this file
      dnnl::matmul matmul;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = cache_.find(key);
        if (it == cache_.end()) {
          if (cache_.size() >= kMaxShapes) cache_.clear();
          it = cache_.emplace(key, Make(key)).first;
        }
        matmul = it->second;
      }
      using dims = dnnl::memory::dims;
      dnnl::memory a_mem(Desc(m, k, lda, trans_a), engine_, const_cast<float*>(a));
      dnnl::memory b_mem(Desc(k, n, ldb, trans_b), engine_, const_cast<float*>(b));
      dnnl::memory c_mem(dnnl::memory::desc(dims{m, n}, dnnl::memory::data_type::f32, dims{ldc, 1}), engine_, c);
      dnnl::stream stream(engine_);
      matmul.execute(stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
      stream.wait();
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }

 private:
  struct Key {
    bool trans_a, trans_b, accumulate;
    int64_t m, n, k, lda, ldb, ldc;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& x) const {
      size_t h = size_t(x.trans_a) | size_t(x.trans_b) << 1 | size_t(x.accumulate) << 2;
      for (int64_t v : {x.m, x.n, x.k, x.lda, x.ldb, x.ldc}) h = h * 1000003u ^ size_t(v);
      return h;
    }
  };
  static constexpr size_t kMaxShapes = 512;

  OnednnMatmuls() : engine_(dnnl::engine::kind::cpu, 0) {}

  // The [rows, cols] operand stored row-major with row stride ld, or its transpose stored so.
  static dnnl::memory::desc Desc(int64_t rows, int64_t cols, int64_t ld, bool trans) {
    using dims = dnnl::memory::dims;
    return dnnl::memory::desc(dims{rows, cols}, dnnl::memory::data_type::f32, trans ? dims{1, ld} : dims{ld, 1});
  }

  dnnl::matmul Make(const Key& x) const {
    dnnl::primitive_attr attr;
    if (x.accumulate) {
      dnnl::post_ops sum;
      sum.append_sum(1.f);
      attr.set_post_ops(sum);
    }
    using dims = dnnl::memory::dims;
    const dnnl::memory::desc c(dims{x.m, x.n}, dnnl::memory::data_type::f32, dims{x.ldc, 1});
    const dnnl::matmul::desc desc(Desc(x.m, x.k, x.lda, x.trans_a), Desc(x.k, x.n, x.ldb, x.trans_b), c);
    return dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, engine_));
  }

  dnnl::engine engine_;
  std::mutex mu_;
  std::unordered_map<Key, dnnl::matmul, KeyHash> cache_;
};

}  // namespace

template <>
void Gemm<float>(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                 int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (m == 1 && k > 0) return RowTimesMatrix(cblas_sgemv, trans_a, trans_b, n, k, alpha, a, lda, b, ldb, beta, c);
  if (ActiveIsa() == Isa::kAvx512 && k > 0 && alpha == 1.f && (beta == 0.f || beta == 1.f) &&
      OnednnMatmuls::Get() != nullptr &&
      OnednnMatmuls::Get()->Run(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta == 1.f, c, ldc)) {
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <>
void Gemm<double>(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                  const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
                  int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (m == 1 && k > 0) return RowTimesMatrix(cblas_dgemv, trans_a, trans_b, n, k, alpha, a, lda, b, ldb, beta, c);
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
