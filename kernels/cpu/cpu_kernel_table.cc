#include "kernels/cpu/cpu_kernel_table.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/sum_squares.h"
#include "kernels/cpu/unit_rows.h"

namespace multiscreen::kernels::cpu {

template <typename Real>
void CpuKernelTable<Real>::Copy(const Real* src, int64_t n, Real* dst) {
  if (n > 0 && src != dst) std::memcpy(dst, src, n * sizeof(Real));
}

template <typename Real>
void CpuKernelTable<Real>::Fill(Real* dst, int64_t n, Real value) {
  std::fill(dst, dst + n, value);
}

template <typename Real>
void CpuKernelTable<Real>::AddInto(const Real* src, int64_t n, Real* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

template <typename Real>
void CpuKernelTable<Real>::Copy2DJobs(const Copy2DJob<Real>* jobs, int n, bool accumulate) {
  CheckCopy2DJobs(n);
  for (int j = 0; j < n; ++j) {
    const Copy2DJob<Real>& job = jobs[j];
    for (int64_t b = 0; b < job.count; ++b) {
      const Real* s = job.src + b * job.src_stride;
      Real* d = job.dst + b * job.dst_stride;
      for (int64_t r = 0; r < job.rows; ++r) {
        const Real* s_row = s + r * job.ld_src;
        Real* d_row = d + r * job.ld_dst;
        if (accumulate) {
          for (int64_t c = 0; c < job.cols; ++c) d_row[c] += s_row[c];
        } else {
          std::copy(s_row, s_row + job.cols, d_row);
        }
      }
    }
  }
}

template <typename Real>
double CpuKernelTable<Real>::Dot(const Real* a, const Real* b, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += double(a[i]) * b[i];
  return sum;
}

template <typename Real>
double CpuKernelTable<Real>::SumSquares(const Real* x, int64_t n, double init) {
  return SumSquaresBlocked(x, n, init);  // threaded; its order fixed (kernels/cpu/sum_squares.h)
}

template <typename Real>
bool CpuKernelTable<Real>::AllFinite(const Real* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return false;
  }
  return true;
}

template <typename Real>
void CpuKernelTable<Real>::Scale(Real* x, int64_t n, Real factor) {
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

template <typename Real>
void CpuKernelTable<Real>::RoundTo(Precision precision, Real* x, int64_t n) {
  if constexpr (std::is_same_v<Real, float>) {
    // In place, threaded, eight at a time (a step's P, Ē: tens of MB), as RoundToBf16 rounds.
    if (precision == Precision::kBf16) ToBf16(x, n, nullptr, x);
    if (precision == Precision::kFp16) RoundToFp16(x, n);
  }
}

template <typename Real>
void CpuKernelTable<Real>::UnitRowsForward(const Real* x, int64_t ldx, Real* y, int64_t ldy, Real* norm, int64_t rows,
                                           int64_t d) {
  cpu::UnitRowsForward(x, ldx, y, ldy, norm, rows, d);
}

template <typename Real>
void CpuKernelTable<Real>::UnitRowsBackward(const Real* y, int64_t ldy, const Real* norm, const Real* dy, int64_t lddy,
                                            Real* dx, int64_t lddx, int64_t rows, int64_t d, bool accumulate) {
  cpu::UnitRowsBackward(y, ldy, norm, dy, lddy, dx, lddx, rows, d, accumulate);
}

template <typename Real>
void CpuKernelTable<Real>::EmbeddingForward(const Real* table, int64_t v0, int64_t v1, int64_t d, const int32_t* ids,
                                            int64_t count, Real scale, Real* out) {
  cpu::EmbeddingForward(table, v0, v1, d, ids, count, scale, out);
}

template <typename Real>
void CpuKernelTable<Real>::EmbeddingBackward(const Real* dout, const int32_t* ids, int64_t count, int64_t v0,
                                             int64_t v1, int64_t d, Real scale, Real* dtable) {
  cpu::EmbeddingBackward(dout, ids, count, v0, v1, d, scale, dtable);
}

template <typename Real>
bool CpuKernelTable<Real>::Bf16Products(Precision precision) {
  if constexpr (std::is_same_v<Real, float>) {
    return precision == Precision::kBf16 && Bf16GemmAvailable();
  } else {
    return false;
  }
}

template <typename Real>
const Real* CpuKernelTable<Real>::RoundedBlock(Precision precision, const Real* x, int64_t rows, int64_t cols,
                                               int64_t ld, std::vector<Real>* scratch) {
  scratch->resize(static_cast<size_t>(rows * cols));
  this->Copy2D(x, ld, rows, cols, scratch->data(), cols);
  RoundTo(precision, scratch->data(), rows * cols);
  return scratch->data();
}

template <typename Real>
const uint16_t* CpuKernelTable<Real>::Bf16Block(const Real* x, int64_t rows, int64_t cols, int64_t ld,
                                                std::vector<uint16_t>* scratch) {
  scratch->resize(static_cast<size_t>(rows * cols));
  if constexpr (std::is_same_v<Real, float>) {
    for (int64_t r = 0; r < rows; ++r) ToBf16(x + r * ld, cols, scratch->data() + r * cols, nullptr);
  }
  return scratch->data();
}

template <typename Real>
void CpuKernelTable<Real>::Gemm(Precision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                Real alpha, const Real* a, int64_t lda, const Real* b, int64_t ldb, Real beta, Real* c,
                                int64_t ldc) {
  if (precision != Precision::kBf16 || !std::is_same_v<Real, float> || m == 0 || n == 0) {
    return cpu::Gemm<Real>(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  // kBf16: both operands rounded to bf16, as a device's Gemm converts them.
  const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k, b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
  if (Bf16Products(precision)) {
    const uint16_t* a16 = Bf16Block(a, a_rows, a_cols, lda, &a_half_);
    const uint16_t* b16 = Bf16Block(b, b_rows, b_cols, ldb, &b_half_);
    return Bf16Gemm(trans_a, trans_b, m, n, k, alpha, a16, a_cols, b16, b_cols, beta, c, ldc);
  }
  const Real* ra = RoundedBlock(precision, a, a_rows, a_cols, lda, &a_rounded_);
  const Real* rb = RoundedBlock(precision, b, b_rows, b_cols, ldb, &b_rounded_);
  cpu::Gemm<Real>(trans_a, trans_b, m, n, k, alpha, ra, a_cols, rb, b_cols, beta, c, ldc);
}

template <typename Real>
void CpuKernelTable<Real>::Bf16Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, Real alpha,
                                    const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, Real beta, Real* c,
                                    int64_t ldc) {
  if constexpr (std::is_same_v<Real, float>) GemmBf16(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <typename Real>
void CpuKernelTable<Real>::PackOperand(Precision precision, const Real* src, int64_t n, PackedOperand<Real>* out) {
  out->precision = precision;
  out->size = n;
  if (precision == Precision::kFp32) {
    out->values = src;
    return;
  }
  // src already holding the precision's values (a decoder's rounded Ē, the step's) is read
  // as it is. With bf16 products the check converts as it goes (one pass where src is exact).
  const bool bf16 = Bf16Products(precision);
  if (bf16) out->half.Resize(n);
  constexpr int64_t kChunk = 4096;
  std::vector<Real> chunk;
  bool exact = true;
  for (int64_t i = 0; i < n && exact; i += kChunk) {
    const int64_t len = std::min(n, i + kChunk) - i;
    if constexpr (std::is_same_v<Real, float>) {
      if (bf16) {
        chunk.resize(len);
        ToBf16(src + i, len, out->half.data() + i, chunk.data());
        exact = std::memcmp(chunk.data(), src + i, len * sizeof(Real)) == 0;
        continue;
      }
    }
    chunk.assign(src + i, src + i + len);
    RoundTo(precision, chunk.data(), len);
    exact = std::memcmp(chunk.data(), src + i, chunk.size() * sizeof(Real)) == 0;
  }
  if (exact && bf16) {
    out->values = src;
    return;
  }
  if (exact) {
    out->values = src;
  } else {
    out->rounded.Resize(n);  // a repack reuses its memory
    Copy(src, n, out->rounded.data());
    RoundTo(precision, out->rounded.data(), n);
    out->values = out->rounded.data();
  }
  // The bf16 products read the 16-bit copy (made once: the weights', per optimizer step).
  if (!bf16) {
    out->half.Resize(0);
  } else if constexpr (std::is_same_v<Real, float>) {
    ToBf16(out->values, n, out->half.data(), nullptr);
  }
}

template <typename Real>
void CpuKernelTable<Real>::GemmPacked(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, Real alpha,
                                      const Real* a, int64_t lda, PackedGemmA read_a, const PackedOperand<Real>& b,
                                      int64_t ldb, Real beta, Real* c, int64_t ldc) {
  const bool as_given = b.precision == Precision::kFp32 || (read_a == PackedGemmA::kAsGemm && b.precision != Precision::kBf16);
  if (as_given) return cpu::Gemm<Real>(trans_a, trans_b, m, n, k, alpha, a, lda, b.values, ldb, beta, c, ldc);
  // A rounded (kRounded; under kBf16 kAsGemm too, as Gemm reads it), into a compact block.
  const int64_t rows = trans_a ? k : m, cols = trans_a ? m : k;
  if (Bf16Products(b.precision) && b.half.size() == b.size) {
    const uint16_t* a16 = Bf16Block(a, rows, cols, lda, &a_half_);
    return Bf16Gemm(trans_a, trans_b, m, n, k, alpha, a16, cols, b.half.data(), ldb, beta, c, ldc);
  }
  const Real* ra = RoundedBlock(b.precision, a, rows, cols, lda, &a_rounded_);
  cpu::Gemm<Real>(trans_a, trans_b, m, n, k, alpha, ra, cols, b.values, ldb, beta, c, ldc);
}

template <typename Real>
void CpuKernelTable<Real>::PackRounded(Precision precision, Real* x, int64_t n, PackedOperand<Real>* out) {
  out->precision = precision;
  out->size = n;
  out->values = x;
  if (Bf16Products(precision)) {  // rounded in place and converted in one pass
    out->half.Resize(n);
    if constexpr (std::is_same_v<Real, float>) ToBf16(x, n, out->half.data(), x);
    return;
  }
  out->half.Resize(0);
  RoundTo(precision, x, n);
}

template <typename Real>
void CpuKernelTable<Real>::PackAsGemm(Precision precision, const Real* src, int64_t n, PackedOperand<Real>* out) {
  out->precision = precision;
  out->size = n;
  out->values = src;
  out->half.Resize(0);
  if (precision != Precision::kBf16 || !std::is_same_v<Real, float>) return;  // as given (kFp16: the caller rounds)
  // kBf16: rounded, as Gemm reads it (a backward gradient in bf16, as on a device).
  if (Bf16Products(precision)) {
    out->half.Resize(n);
    if constexpr (std::is_same_v<Real, float>) ToBf16(src, n, out->half.data(), nullptr);
    out->values = nullptr;  // the 16-bit copy alone holds it
    return;
  }
  out->rounded.Resize(n);
  Copy(src, n, out->rounded.data());
  RoundTo(precision, out->rounded.data(), n);
  out->values = out->rounded.data();
}

template <typename Real>
void CpuKernelTable<Real>::GemmBothPacked(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, Real alpha,
                                          const PackedOperand<Real>& a, int64_t lda, const PackedOperand<Real>& b,
                                          int64_t ldb, Real beta, Real* c, int64_t ldc) {
  CheckSamePrecision(a, b);
  if (Bf16Products(a.precision) && a.half.size() == a.size && b.half.size() == b.size) {
    return Bf16Gemm(trans_a, trans_b, m, n, k, alpha, a.half.data(), lda, b.half.data(), ldb, beta, c, ldc);
  }
  // Values already rounded to the precision by the packing (kFp32: as given).
  cpu::Gemm<Real>(trans_a, trans_b, m, n, k, alpha, a.values, lda, b.values, ldb, beta, c, ldc);
}

template <typename Real>
void CpuKernelTable<Real>::MoveAddTransposed(Real* a, int64_t rows, int64_t cols, int64_t lda, Real* b, int64_t ldb) {
  cpu::MoveAddTransposed(a, rows, cols, lda, b, ldb);
}

template <typename Real>
void CpuKernelTable<Real>::ScreeningForward(const ScreeningShape& shape, const Real* P, const TileScalars* tiles,
                                            const ScreeningSaved<Real>& saved, Real* U) {
  cpu::ScreeningForward(shape, P, tiles, saved, U, &screening_ws_);
}

template <typename Real>
void CpuKernelTable<Real>::ScreeningBackward(const ScreeningShape& shape, const Real* P, const TileScalars* tiles,
                                             const ScreeningSaved<Real>& saved, const Real* dU, Real* dP,
                                             TileScalarGrads* grads) {
  cpu::ScreeningBackward(shape, P, tiles, saved, dU, dP, grads, &screening_ws_);
}

template <typename Real>
void CpuKernelTable<Real>::HeadLoss(const HeadLossArgs<Real>& args) {
  if (args.lse != nullptr) return head_.Run(args);
  HeadLossArgs<Real> a = args;
  head_lse_.resize(a.rows);
  head_target_logit_.assign(a.rows, 0.0);
  a.lse = head_lse_.data();
  a.target_logit = head_target_logit_.data();
  head_.Run(a);
  head_loss_sum_ += HeadMeanLoss(a.lse, a.target_logit, a.rows);
}

template <typename Real>
void CpuKernelTable<Real>::SoftmaxStats(const Real* z, int64_t ld, int64_t rows, int64_t V, double* row_max,
                                        double* row_sum) {
  cpu::SoftmaxStats(z, ld, rows, V, row_max, row_sum);
}

template <typename Real>
void CpuKernelTable<Real>::TargetLogits(const Real* z, int64_t ld, int64_t rows, const int64_t* target, double* out) {
  for (int64_t r = 0; r < rows; ++r) {
    if (target[r] >= 0) out[r] = z[r * ld + target[r]];
  }
}

template <typename Real>
void CpuKernelTable<Real>::CrossEntropyGrad(Real* z, int64_t ld, int64_t rows, int64_t V, const double* lse,
                                            const int64_t* target, Real coef) {
  coef_.assign(rows, coef);
  cpu::CrossEntropyGrad(z, ld, rows, V, lse, target, coef_.data());
}

template <typename Real>
void CpuKernelTable<Real>::AdamW(const AdamWArgs& args, Real* params, const Real* grads, Real* m, Real* v, int64_t n) {
  AdamWUpdate(args, params, grads, m, v, n);
}

template class CpuKernelTable<float>;
template class CpuKernelTable<double>;

}  // namespace multiscreen::kernels::cpu
