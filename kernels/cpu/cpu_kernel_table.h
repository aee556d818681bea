// The kernel table on the CPU (kernels/kernel_table.h): each op is the CPU kernel of
// kernels/cpu/ it names (OpenBLAS for GEMMs, the ISA-dispatched screening and head
// kernels, OpenMP threads), on host memory. The reference the CUDA table is tested
// against, and the CPU training path.
#pragma once

#include <vector>

#include "kernels/cpu/argmax.h"
#include "kernels/cpu/head_loss.h"
#include "kernels/cpu/screening.h"
#include "kernels/kernel_table.h"

namespace multiscreen::kernels::cpu {

template <typename Real>
class CpuKernelTable final : public KernelTable<Real> {
 public:
  explicit CpuKernelTable(const KernelOptions& options = {}) : head_(options) {}
  Device device() const override { return Device::kCpu; }

  void Upload(const Real* host, int64_t n, Real* dst) override { Copy(host, n, dst); }
  void Download(const Real* src, int64_t n, Real* host) override { Copy(src, n, host); }
  void Copy(const Real* src, int64_t n, Real* dst) override;
  void Fill(Real* dst, int64_t n, Real value) override;
  void AddInto(const Real* src, int64_t n, Real* dst) override;
  void AddHost(const Real* host, int64_t n, Real* dst) override { AddInto(host, n, dst); }
  void Copy2DJobs(const Copy2DJob<Real>* jobs, int n, bool accumulate) override;
  double Dot(const Real* a, const Real* b, int64_t n) override;
  double SumSquares(const Real* x, int64_t n, double init = 0) override;
  bool AllFinite(const Real* x, int64_t n) override;
  int64_t Argmax(const Real* x, int64_t n) override { return cpu::Argmax(x, n); }
  void Scale(Real* x, int64_t n, Real factor) override;
  void RoundTo(Precision precision, Real* x, int64_t n) override;

  void UnitRowsForward(const Real* x, int64_t ldx, Real* y, int64_t ldy, Real* norm, int64_t rows,
                       int64_t d) override;
  void UnitRowsBackward(const Real* y, int64_t ldy, const Real* norm, const Real* dy, int64_t lddy, Real* dx,
                        int64_t lddx, int64_t rows, int64_t d, bool accumulate) override;
  void EmbeddingForward(const Real* table, int64_t v0, int64_t v1, int64_t d, const int32_t* ids, int64_t count,
                        Real scale, Real* out) override;
  void EmbeddingBackward(const Real* dout, const int32_t* ids, int64_t count, int64_t v0, int64_t v1, int64_t d,
                         Real scale, Real* dtable) override;
  // kFp32, kFp16 (the caller rounds fp16 operands) and double: cpu::Gemm on the operands as
  // given. kBf16: on bf16-rounded copies of A and B, as a device's Gemm converts them — on the
  // bf16 dot products where Bf16GemmAvailable() (kernels/cpu/gemm_bf16.h), else an fp32 GEMM
  // of the rounded copies (the same values; the sums' order differs).
  void Gemm(Precision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, Real alpha,
            const Real* a, int64_t lda, const Real* b, int64_t ldb, Real beta, Real* c, int64_t ldc) override;
  // src itself under kFp32 and where src already holds the 16-bit precision's values
  // (then it must outlive the operand unchanged, as under kFp32); else a rounded copy in
  // out->rounded. With bf16 products also their bf16 copy in out->half (once: a step's
  // weights are packed once per optimizer step).
  void PackOperand(Precision precision, const Real* src, int64_t n, PackedOperand<Real>* out) override;
  // Gemm on b's values with A as given (kFp32; kAsGemm under kFp16) or A's [m, k] block
  // rounded into a compact copy (kRounded; kAsGemm under kBf16, as Gemm reads it).
  void GemmPacked(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, Real alpha, const Real* a, int64_t lda,
                  PackedGemmA read_a, const PackedOperand<Real>& b, int64_t ldb, Real beta, Real* c,
                  int64_t ldc) override;
  // RoundTo in place; x itself is the operand (with bf16 products also its bf16 copy, made
  // in the same pass).
  void PackRounded(Precision precision, Real* x, int64_t n, PackedOperand<Real>* out) override;
  // As Gemm reads it: src itself (kFp32, kFp16), under kBf16 rounded — a bf16 copy with bf16
  // products, else a rounded fp32 copy (a step's backward gradient in bf16, as on a device).
  void PackAsGemm(Precision precision, const Real* src, int64_t n, PackedOperand<Real>* out) override;
  // The bf16 products on both bf16 copies where the table made them, else Gemm on their values.
  void GemmBothPacked(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, Real alpha,
                      const PackedOperand<Real>& a, int64_t lda, const PackedOperand<Real>& b, int64_t ldb, Real beta,
                      Real* c, int64_t ldc) override;
  void MoveAddTransposed(Real* a, int64_t rows, int64_t cols, int64_t lda, Real* b, int64_t ldb) override;
  void ScreeningForward(const ScreeningShape& shape, const Real* P, const TileScalars* tiles,
                        const ScreeningSaved<Real>& saved, Real* U) override;
  void ScreeningBackward(const ScreeningShape& shape, const Real* P, const TileScalars* tiles,
                         const ScreeningSaved<Real>& saved, const Real* dU, Real* dP,
                         TileScalarGrads* grads) override;

  void PrepareHead(const Real* e_bar, int64_t vocab, int64_t d_e) override { head_.Prepare(e_bar, vocab, d_e); }
  // With args.lse and args.target_logit null, the rows' statistics go to head_lse_ and
  // head_target_logit_ and their mean loss into head_loss_sum_.
  void HeadLoss(const HeadLossArgs<Real>& args) override;
  double TakeHeadLoss() override {
    const double sum = head_loss_sum_;
    head_loss_sum_ = 0;
    return sum;
  }
  void SoftmaxStats(const Real* z, int64_t ld, int64_t rows, int64_t V, double* row_max, double* row_sum) override;
  void TargetLogits(const Real* z, int64_t ld, int64_t rows, const int64_t* target, double* out) override;
  void CrossEntropyGrad(Real* z, int64_t ld, int64_t rows, int64_t V, const double* lse, const int64_t* target,
                        Real coef) override;

  void AdamW(const AdamWArgs& args, Real* params, const Real* grads, Real* m, Real* v, int64_t n) override;
  void Synchronize() override {}

 private:
  FusedHead<Real> head_;
  std::vector<double> head_lse_, head_target_logit_;  // HeadLoss's rows when the caller keeps none
  double head_loss_sum_ = 0;                          // TakeHeadLoss's sum
  ScreeningWorkspace<Real> screening_ws_;
  std::vector<Real> coef_;
  // Whether products in `precision` run on the bf16 dot products (float, kBf16, Bf16GemmAvailable).
  static bool Bf16Products(Precision precision);
  // The [rows, cols] block of x (row stride ld) as a compact copy in *scratch: rounded to
  // `precision` (RoundTo), or as bf16 bits.
  const Real* RoundedBlock(Precision precision, const Real* x, int64_t rows, int64_t cols, int64_t ld,
                           std::vector<Real>* scratch);
  const uint16_t* Bf16Block(const Real* x, int64_t rows, int64_t cols, int64_t ld, std::vector<uint16_t>* scratch);
  // GemmBf16 (float; never called for double).
  void Bf16Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, Real alpha, const uint16_t* a, int64_t lda,
                const uint16_t* b, int64_t ldb, Real beta, Real* c, int64_t ldc);

  std::vector<Real> a_rounded_, b_rounded_;  // Gemm's and GemmPacked's rounded operands
  std::vector<uint16_t> a_half_, b_half_;    // their bf16 copies
};

}  // namespace multiscreen::kernels::cpu
