// The CUDA kernel table (cuda_kernel_table.h): the factory's checks, then one call
// per op into kernels/cuda's op families, on the process's table stream (table_stream.h), with the table's
// scratch. Host⇄device copies happen here (Upload, Download, AddHost) and in the ops
// that take host arrays; the per-step ones (AddHost, token ids, targets, the embedding
// backward's CSR) go through the table's pinned staging, released at each of the table's
// waits for its stream (Released).
#include "kernels/cuda/cuda_kernel_table.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/escaping.h"

#include "kernels/cuda/adamw.h"
#include "kernels/cuda/argmax.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_check.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/pinned_staging.h"
#include "kernels/cuda/screening.h"
#include "kernels/cuda/screening_tiled.h"
#include "kernels/cuda/stream_graph.h"
#include "kernels/cuda/table_stream.h"
#include "kernels/cuda/unit_rows.h"

namespace multiscreen::kernels::cuda {
namespace {

class CudaKernelTable final : public KernelTable<float> {
 public:
  CudaKernelTable(cudaStream_t stream, std::unique_ptr<GemmRunner> gemm, bool tiled_screening, bool u_operand,
                  bool gradient_operand)
      : stream_(stream),
        gemm_(std::move(gemm)),
        tiled_screening_(tiled_screening),
        u_operand_(u_operand),
        gradient_operand_(gradient_operand) {
    reduce_.Resize(kReduceScratch);
    blocks_done_.Resize(1);
    MS_CUDA_CHECK("MakeCudaKernelTable", cudaMemsetAsync(blocks_done_.data(), 0, sizeof(unsigned), stream_));
  }
  ~CudaKernelTable() override {
    cudaStreamSynchronize(stream_);
    gemm_.reset();
  }

  Device device() const override { return Device::kCuda; }

  // ---- memory ----
  void Upload(const float* host, int64_t n, float* dst) override {
    if (n <= 0) return;
    MS_CUDA_CHECK("Upload", cudaMemcpyAsync(dst, host, n * sizeof(float), cudaMemcpyHostToDevice, stream_));
  }
  void Download(const float* src, int64_t n, float* host) override {
    if (n <= 0) return;
    MS_CUDA_CHECK("Download", cudaMemcpyAsync(host, src, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    MS_CUDA_CHECK("Download", cudaStreamSynchronize(stream_));
    Released();
  }
  // One gather launch into staging, one copy, one wait; the ranges' table is uploaded
  // only when it differs from the last call's (a training step asks for the same ranges).
  void DownloadRanges(const float* src, const int64_t* begin, const int64_t* length, int64_t count,
                      float* host) override {
    std::vector<int64_t> ranges(3 * count);
    int64_t total = 0;
    for (int64_t i = 0; i < count; ++i) {
      ranges[3 * i] = begin[i];
      ranges[3 * i + 1] = length[i];
      ranges[3 * i + 2] = total;
      total += length[i];
    }
    if (total <= 0) return;
    if (ranges != host_ranges_) {
      ranges_.Resize(3 * count);
      MS_CUDA_CHECK("DownloadRanges", cudaMemcpyAsync(ranges_.data(), ranges.data(), 3 * count * sizeof(int64_t),
                                                      cudaMemcpyHostToDevice, stream_));
      host_ranges_ = std::move(ranges);
    }
    gathered_.Resize(total);
    cuda::GatherRanges(src, ranges_.data(), count, gathered_.data(), stream_);
    Download(gathered_.data(), total, host);
  }
  void Copy(const float* src, int64_t n, float* dst) override {
    if (n <= 0) return;
    MS_CUDA_CHECK("Copy", cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
  }
  void Fill(float* dst, int64_t n, float value) override { cuda::Fill(dst, n, value, stream_); }
  void AddInto(const float* src, int64_t n, float* dst) override { cuda::AddInto(src, n, dst, stream_); }
  void AddHost(const float* host, int64_t n, float* dst) override {
    if (n <= 0) return;
    host_staging_.Resize(n);
    MS_CUDA_CHECK("AddHost", cudaMemcpyAsync(host_staging_.data(), staging_.Stage("AddHost", host, n),
                                             n * sizeof(float), cudaMemcpyHostToDevice, stream_));
    cuda::AddInto(host_staging_.data(), n, dst, stream_);
  }
  void Copy2DJobs(const Copy2DJob<float>* jobs, int n, bool accumulate) override {
    cuda::Copy2DJobs(jobs, n, accumulate, stream_);
  }
  double Dot(const float* a, const float* b, int64_t n) override {
    return Released(cuda::Dot(a, b, n, Reduce(), stream_));
  }
  void DotAddInto(const float* a, const float* b, int64_t n, float* dst) override {
    cuda::DotAddInto(a, b, n, dst, Reduce(), stream_);
  }
  double SumSquares(const float* x, int64_t n, double init = 0) override {
    return init + Released(cuda::SumSquares(x, n, Reduce(), stream_));
  }
  bool AllFinite(const float* x, int64_t n) override { return Released(cuda::AllFinite(x, n, Reduce(), stream_)); }
  int64_t Argmax(const float* x, int64_t n) override {
    if (argmax_.size() == 0) argmax_.Resize(1);
    return Released(cuda::Argmax(x, n, argmax_.data(), stream_));
  }
  void Scale(float* x, int64_t n, float factor) override { cuda::Scale(x, n, factor, stream_); }
  void RoundTo(Precision precision, float* x, int64_t n) override { cuda::RoundTo(precision, x, n, stream_); }

  // ---- the model's kernels ----
  void UnitRowsForward(const float* x, int64_t ldx, float* y, int64_t ldy, float* norm, int64_t rows,
                       int64_t d) override {
    cuda::UnitRowsForward(x, ldx, y, ldy, norm, rows, d, stream_);
  }
  void UnitRowsBackward(const float* y, int64_t ldy, const float* norm, const float* dy, int64_t lddy, float* dx,
                        int64_t lddx, int64_t rows, int64_t d, bool accumulate) override {
    cuda::UnitRowsBackward(y, ldy, norm, dy, lddy, dx, lddx, rows, d, accumulate, stream_);
  }
  void EmbeddingForward(const float* table, int64_t v0, int64_t v1, int64_t d, const int32_t* ids, int64_t count,
                        float scale, float* out) override {
    cuda::EmbeddingForward(table, v0, v1, d, ids, count, scale, out, &embedding_, &staging_, stream_);
  }
  void EmbeddingBackward(const float* dout, const int32_t* ids, int64_t count, int64_t v0, int64_t v1, int64_t d,
                         float scale, float* dtable) override {
    cuda::EmbeddingBackward(dout, ids, count, v0, v1, d, scale, dtable, &embedding_, &staging_, stream_);
  }
  void Gemm(Precision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) override {
    gemm_->Run(precision, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  // 16-bit operands in their own format (out->half), converted once; kFp32: src itself.
  // A repack (the training step's, every step and micro-batch) reuses out->half's memory.
  void PackOperand(Precision precision, const float* src, int64_t n, PackedOperand<float>* out) override {
    if (HalfOperand(precision, src, n, out)) gemm_->Pack(precision, src, n, out->half.data());
  }
  void PackAsGemm(Precision precision, const float* src, int64_t n, PackedOperand<float>* out) override {
    PackOperand(precision, src, n, out);  // Gemm converts as Pack does
  }
  void PackRounded(Precision precision, float* x, int64_t n, PackedOperand<float>* out) override {
    if (HalfOperand(precision, x, n, out)) gemm_->PackRounded(precision, x, n, out->half.data());
  }
  // Under 16 bits one launch into out->half (dst unwritten); under kFp32 the two calls, a
  // lone contiguous block copied as Copy copies (W_O: cudaMemcpyAsync, no kernel).
  void PackJobsRounded(Precision precision, const Copy2DJob<float>* jobs, int n, float* dst, int64_t n_dst,
                       PackedOperand<float>* out) override {
    if (HalfOperand(precision, dst, n_dst, out)) {
      return cuda::Copy2DJobsRoundPack(precision, jobs, n, dst, out->half.data(), stream_);
    }
    const Copy2DJob<float>& j = jobs[0];
    if (n == 1 && j.count == 1 && (j.rows == 1 || j.ld_src == j.cols) && (j.rows == 1 || j.ld_dst == j.cols)) {
      return Copy(j.src, j.rows * j.cols, j.dst);
    }
    Copy2DJobs(jobs, n, /*accumulate=*/false);
  }
  void GemmBothPacked(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const PackedOperand<float>& a, int64_t lda, const PackedOperand<float>& b, int64_t ldb,
                      float beta, float* c, int64_t ldc) override {
    CheckSamePrecision(a, b);
    if (a.precision == Precision::kFp32) {
      return gemm_->Run(a.precision, trans_a, trans_b, m, n, k, alpha, a.values, lda, b.values, ldb, beta, c, ldc);
    }
    gemm_->RunPacked(a.precision, trans_a, trans_b, m, n, k, alpha, a.half.data(), lda, b.half.data(), ldb, beta, c,
                     ldc);
  }
  // A converted either way (read_a: Gemm's packing rounds as RoundTo does).
  void GemmPacked(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, PackedGemmA, const PackedOperand<float>& b, int64_t ldb, float beta, float* c,
                  int64_t ldc) override {
    if (b.precision == Precision::kFp32) {
      return gemm_->Run(b.precision, trans_a, trans_b, m, n, k, alpha, a, lda, b.values, ldb, beta, c, ldc);
    }
    gemm_->RunPackedB(b.precision, trans_a, trans_b, m, n, k, alpha, a, lda, b.half.data(), ldb, beta, c, ldc);
  }
  void MoveAddTransposed(float* a, int64_t rows, int64_t cols, int64_t lda, float* b, int64_t ldb) override {
    cuda::MoveAddTransposed(a, rows, cols, lda, b, ldb, stream_);
  }
  // Under bf16 for the shapes the tiled kernels take: P written in bf16 by the GEMM
  // (cuBLASLt's bf16 D, fp32 compute) and read so by them (issue 42: half P's bytes, and no
  // RoundTo pass); otherwise the default (fp32 P, rounded in place).
  bool ScreeningProjection(const ScreeningShape& shape, int64_t rows, int64_t cols, int64_t k,
                           const PackedOperand<float>& x, const PackedOperand<float>& w, float* P) override {
    CheckSamePrecision(x, w);
    if (!(tiled_screening_ && x.precision == Precision::kBf16 && cuda::ScreeningTiledShape(shape))) {
      return KernelTable<float>::ScreeningProjection(shape, rows, cols, k, x, w, P);
    }
    gemm_->RunPackedTo16(x.precision, false, false, rows, cols, k, 1.f, x.half.data(), k, w.half.data(), cols,
                         reinterpret_cast<uint16_t*>(P), cols);
    return true;
  }
  void ScreeningForward(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                        const ScreeningSaved<float>& saved, float* U) override {
    if (shape.p_bf16) {
      cuda::ScreeningTiledForwardBf16P(shape, reinterpret_cast<const uint16_t*>(P), tiles, saved, U, &screening_,
                                       stream_);
    } else if (tiled_screening_) {
      cuda::ScreeningTiledForward(shape, P, tiles, saved, U, &screening_, stream_);  // simple at other widths
    } else {
      cuda::ScreeningForward(shape, P, tiles, saved, U, &screening_, stream_);
    }
  }
  // On the bf16 path of the tiled kernels (P in bf16: shape.p_bf16) the forward's epilogue
  // writes U as W_O's bf16 operand itself (issue 42: the fp32 U's write and PackRounded's
  // read, rounded write-back and bf16 write go); U stays unwritten. Otherwise the default.
  void ScreeningForwardOperand(Precision precision, const ScreeningShape& shape, const float* P,
                               const TileScalars* tiles, const ScreeningSaved<float>& saved, float* U,
                               PackedOperand<float>* u_op) override {
    if (!(u_operand_ && shape.p_bf16 && precision == Precision::kBf16)) {
      return KernelTable<float>::ScreeningForwardOperand(precision, shape, P, tiles, saved, U, u_op);
    }
    HalfOperand(precision, U, shape.batch * shape.seq * shape.tiles * shape.d_v, u_op);
    cuda::ScreeningTiledForwardBf16PU(shape, reinterpret_cast<const uint16_t*>(P), tiles, saved, u_op->half.data(),
                                      &screening_, stream_);
  }
  void ScreeningBackward(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                         const ScreeningSaved<float>& saved, const float* dU, float* dP,
                         TileScalarGrads* grads) override {
    if (shape.p_bf16) {
      cuda::ScreeningTiledBackwardBf16P(shape, reinterpret_cast<const uint16_t*>(P), tiles, saved, dU, dP, grads,
                                        &screening_, stream_);
    } else if (tiled_screening_) {
      cuda::ScreeningTiledBackward(shape, P, tiles, saved, dU, dP, grads, &screening_, stream_);
    } else {
      cuda::ScreeningBackward(shape, P, tiles, saved, dU, dP, grads, &screening_, stream_);
    }
  }

  void BeginScreeningStep() override { screening_.tables.MarkStale(); }
  void PrepareScreeningTables(const ScreeningShape& shape, const TileScalars* tiles) override {
    screening_.tables.Get("PrepareScreeningTables", shape, tiles, stream_);
  }
  void ScreeningBackwardAddParamGrads(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                                      const ScreeningSaved<float>& saved, const float* dU, float* dP, float* g_sw,
                                      float* g_sr, float* g_so) override {
    const TileScalarGradsOut out(g_sw, g_sr, g_so);
    if (shape.p_bf16) {
      cuda::ScreeningTiledBackwardBf16P(shape, reinterpret_cast<const uint16_t*>(P), tiles, saved, dU, dP, out,
                                        &screening_, stream_);
    } else if (tiled_screening_) {
      cuda::ScreeningTiledBackward(shape, P, tiles, saved, dU, dP, out, &screening_, stream_);
    } else {
      cuda::ScreeningBackward(shape, P, tiles, saved, dU, dP, out, &screening_, stream_);
    }
  }
  // P in bf16 (ScreeningProjection's bf16 path) under bf16: the tiled passes write ∂L/∂P as
  // the projections' bf16 operand (ScreeningTiledBackwardBf16PDP; issue 42); otherwise fp32.
  bool ScreeningBackwardToOperand(const ScreeningShape& shape, Precision precision, const float* P,
                                  const TileScalars* tiles, const ScreeningSaved<float>& saved, const float* dU,
                                  DeviceArray<float>* dP, PackedOperand<float>* dp_op, float* g_sw, float* g_sr,
                                  float* g_so) override {
    if (!(shape.p_bf16 && precision == Precision::kBf16 && gradient_operand_)) {
      return KernelTable<float>::ScreeningBackwardToOperand(shape, precision, P, tiles, saved, dU, dP, dp_op, g_sw,
                                                            g_sr, g_so);
    }
    HalfOperand(precision, nullptr, shape.batch * shape.seq * shape.tiles * shape.p_cols(), dp_op);
    cuda::ScreeningTiledBackwardBf16PDP(shape, reinterpret_cast<const uint16_t*>(P), tiles, saved, dU,
                                        dp_op->half.data(), TileScalarGradsOut(g_sw, g_sr, g_so), &screening_,
                                        stream_);
    return true;
  }

  // ---- the vocabulary head ----
  void PrepareHead(const float*, int64_t, int64_t) override {}  // the head reads Ē as given
  void HeadLoss(const HeadLossArgs<float>& args) override {
    cuda::HeadLoss(args, gemm_.get(), &cross_entropy_, &staging_, stream_);
    if (args.lse != nullptr) Released();  // it waited for its statistics
  }
  double TakeHeadLoss() override { return Released(cuda::TakeHeadLoss(&cross_entropy_, stream_)); }
  void SoftmaxStats(const float* z, int64_t ld, int64_t rows, int64_t V, double* row_max, double* row_sum) override {
    cuda::SoftmaxStats(z, ld, rows, V, row_max, row_sum, &cross_entropy_, stream_);
    Released();
  }
  void TargetLogits(const float* z, int64_t ld, int64_t rows, const int64_t* target, double* out) override {
    cuda::TargetLogits(z, ld, rows, target, out, &cross_entropy_, &staging_, stream_);
    Released();
  }
  void CrossEntropyGrad(float* z, int64_t ld, int64_t rows, int64_t V, const double* lse, const int64_t* target,
                        float coef) override {
    cuda::CrossEntropyGrad(z, ld, rows, V, lse, target, coef, &cross_entropy_, &staging_, stream_);
  }

  // ---- the optimizer ----
  void AdamW(const AdamWArgs& args, float* params, const float* grads, float* m, float* v, int64_t n) override {
    cuda::AdamW(args, params, grads, m, v, n, stream_);
  }

  void Synchronize() override {
    MS_CUDA_CHECK("Synchronize", cudaStreamSynchronize(stream_));
    Released();
  }

  // ---- one captured micro-step ----
  void PreloadInputs(const int32_t* ids, const int64_t* targets, int64_t n) override {
    embedding_.ids.Upload("PreloadInputs", ids, n, &staging_, stream_);
    cross_entropy_.target.Upload("PreloadInputs", targets, n, &staging_, stream_);
  }
  bool CanCapture() const override { return true; }
  void BeginCapture() override { BeginStreamCapture(stream_); }
  std::unique_ptr<CapturedGraph> EndCapture() override { return EndStreamCapture(stream_); }
  void LaunchGraph(const CapturedGraph& graph) override { LaunchStreamGraph(graph, stream_); }
  bool EndCaptureInto(std::unique_ptr<CapturedGraph>* graph) override { return EndStreamCaptureInto(stream_, graph); }

 private:
  // After a wait for stream_ (every copy out of the staging has run): the staging's bytes
  // may be handed out again. Returns `result`, for the ops that return what they waited for.
  template <typename T>
  T Released(T result) {
    staging_.Release();
    return result;
  }
  void Released() { staging_.Release(); }

  // *out set up as an operand of `precision` with n elements: src itself under kFp32
  // (false: nothing to pack), else out->half sized for the 16-bit copy (true).
  static bool HalfOperand(Precision precision, const float* src, int64_t n, PackedOperand<float>* out) {
    out->precision = precision;
    out->size = n;
    out->values = precision == Precision::kFp32 ? src : nullptr;
    if (precision == Precision::kFp32) return false;
    if (out->half.device() != Device::kCuda) out->half = DeviceArray<uint16_t>(Device::kCuda);
    out->half.Resize(n);
    return true;
  }

  cudaStream_t stream_;
  std::unique_ptr<GemmRunner> gemm_;
  bool tiled_screening_;  // ScreeningTiledForward/Backward, else the simple kernels
  bool u_operand_;         // KernelOptions::screening_u_operand
  bool gradient_operand_;  // KernelOptions::screening_gradient_operand
  DeviceArray<double> reduce_{Device::kCuda};       // kReduceScratch doubles for Dot and friends
  DeviceArray<unsigned> blocks_done_{Device::kCuda};  // their count of blocks done (0 between calls)
  ReduceScratch Reduce() { return {reduce_.data(), blocks_done_.data()}; }
  DeviceArray<float> host_staging_{Device::kCuda};  // AddHost's uploaded values
  PinnedStaging staging_;                           // per-step host uploads (pinned)
  DeviceArray<int32_t> argmax_{Device::kCuda};      // Argmax's one index
  DeviceArray<int64_t> ranges_{Device::kCuda};      // DownloadRanges' table [count, 3] (begin, length, offset)
  std::vector<int64_t> host_ranges_;                // what ranges_ holds
  DeviceArray<float> gathered_{Device::kCuda};      // DownloadRanges' staging
  EmbeddingScratch embedding_;
  ScreeningScratch screening_;
  CrossEntropyScratch cross_entropy_;
};

// `kernel`, where kAuto gives way to the environment variable `variable`
// (auto|simple|tiled, case-insensitive; unset or empty: auto) and auto means tiled
// exactly under kBf16: whether the tiled kernels run.
absl::StatusOr<bool> TiledKernel(ScreeningKernel kernel, const char* variable, Precision precision) {
  if (kernel == ScreeningKernel::kAuto) {
    if (const char* env = std::getenv(variable); env != nullptr && *env != '\0') {
      const std::string v = absl::AsciiStrToLower(env);
      if (v == "simple") {
        kernel = ScreeningKernel::kSimple;
      } else if (v == "tiled") {
        kernel = ScreeningKernel::kTiled;
      } else if (v != "auto") {
        return absl::InvalidArgumentError(
            absl::StrCat(variable, "=", absl::CHexEscape(env), ": expected auto, simple or tiled"));
      }
    }
  }
  if (kernel == ScreeningKernel::kAuto) return precision == Precision::kBf16;
  return kernel == ScreeningKernel::kTiled;
}

}  // namespace

absl::StatusOr<bool> TiledScreening(const KernelOptions& options) {
  return TiledKernel(options.screening_kernel, "MULTISCREEN_SCREENING_KERNEL", options.precision);
}

absl::StatusOr<bool> TiledAttention(const KernelOptions& options) {
  return TiledKernel(options.attention_kernel, "MULTISCREEN_ATTENTION_KERNEL", options.precision);
}

absl::StatusOr<std::unique_ptr<KernelTable<float>>> MakeCudaKernelTable(const KernelOptions& options) {
  absl::StatusOr<bool> tiled = TiledScreening(options);
  if (!tiled.ok()) return tiled.status();
  if (absl::Status usable = CheckCudaDevice(); !usable.ok()) return usable;
  // Every table of a process issues on the one table stream, so that the ops of
  // different tables — the model's, the stage's parameter upload, bench's optimizer —
  // run in the order the host issues them, as on the CPU; it is blocking, so it orders
  // with legacy-stream work as the legacy stream itself did, and it can be captured.
  // (Overlap through streams of their own comes with the communication streams of
  // multi-GPU training.)
  cudaStream_t stream = TableStream();
  absl::StatusOr<std::unique_ptr<GemmRunner>> gemm = GemmRunner::Create(stream);
  if (!gemm.ok()) return gemm.status();
  return std::unique_ptr<KernelTable<float>>(new CudaKernelTable(
      stream, std::move(*gemm), *tiled, options.screening_u_operand, options.screening_gradient_operand));
}

}  // namespace multiscreen::kernels::cuda
