// The kernel table: every operation of a training step that touches a tensor, behind
// one interface with one implementation per device — kernels/cpu/cpu_kernel_table.h
// (the CPU kernels, OpenBLAS) and kernels/cuda/cuda_kernel_table.h (CUDA kernels,
// cuBLASLt). model/ orchestrates the step once against this table (forward order,
// what is saved, the backward, the gradient layout), so the CPU tests of the model
// (twin parity, finite differences, every parallel layout) test the orchestration the
// GPU runs; each CUDA op is tested against its CPU twin (tests/cuda/).
//
// Conventions, the same for every implementation:
// - Tensors (width d_E, d_K, d_V, V: activations, weights, gradients) are row-major
//   arrays of Real on the table's device(), passed as pointers with their sizes and
//   row strides (BLAS style); DeviceArray<Real> gives the model such memory.
// - Integer indices (token ids, local targets) and per-row statistics (row max, sums,
//   log-sum-exp, target logits: O(rows) doubles) live in host memory; an
//   implementation on another device copies them itself. Tile scalars are host values.
// - Host⇄device copies of tensors happen only in Upload/Download (parameters in,
//   losses out, checkpoint staging) and the scalar reads named below.
// - Ops run in order on the table's stream; results read on the host (Dot, the head's
//   statistics, Download) are complete when the call returns.
// - A failing device call (a launch error, an illegal address) is fatal: one line with
//   the op and the device's message, then exit, as a communicator failure is — the
//   step cannot go on with half its tensors written.
// - A table holds scratch memory (the screening workspace, the head's buffers): one
//   table per model instance; not thread-safe.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/buffer.h"
#include "kernels/device_array.h"
#include "kernels/screening_types.h"

namespace multiscreen {

// Compute precision of the step (DESIGN "Precision"): fp32 masters always.
enum class Precision {
  kFp32,  // everything in Real
  kBf16,  // fp32 masters; GEMM operands (weights, Ē, activations, backward gradients) in bf16
  kFp16,  // as kBf16 in IEEE half, backward GEMM operands too (so scaled gradients can overflow)
};

// How the CPU's vocabulary head computes its three products (logits, ∂L/∂y, ∂L/∂Ē).
enum class HeadPath {
  kPanels,  // the panel kernels (kernels/cpu/head_panels.h) where the head allows them, else BLAS
  kBlas,    // whole-row OpenBLAS GEMMs always (the baseline bench compares the panels with)
};

// Which CUDA screening kernels a table runs (kernels/cuda/screening.h: the simple
// fp32 kernels, the oracle; kernels/cuda/screening_tiled.h: tensor cores, bf16 operands
// with fp32 accumulation, d_K = 16 and d_V = 64 only, other widths the simple ones).
enum class ScreeningKernel {
  kAuto,    // the precision's: tiled under kBf16, simple under kFp32 and kFp16
  kSimple,  // the simple kernels in every precision
  kTiled,   // the tiled kernels in every precision (tests: the tiled kernel alone)
};

// Which CUDA attention kernels the Transformer's kernels run (kernels/cuda/attention.h:
// the simple fp32 kernels, the oracle; kernels/cuda/attention_tiled.h: tensor cores,
// bf16 operands with fp32 accumulation, softmax at d_h = 64 only, the rest the simple
// ones): the same three choices as the screening's.
using AttentionKernel = ScreeningKernel;

// Options of a kernel table (the head's blocking is the CPU's; CUDA picks its own).
struct KernelOptions {
  HeadPath head_path = HeadPath::kPanels;
  int64_t head_chunk_rows = 512;   // tokens per logits chunk: [chunk, V] is the largest logits block
  int64_t head_vocab_block = 512;  // vocabulary columns a thread takes at a time (whole panels of 32)
  // The step's compute precision, as the model passes it to Gemm; the CUDA table picks
  // its screening kernels by it (screening_kernel). The CPU's table ignores both.
  Precision precision = Precision::kFp32;
  // kAuto gives way to the environment variable MULTISCREEN_SCREENING_KERNEL
  // (auto|simple|tiled), read when a CUDA table is made (docs/performance.md).
  ScreeningKernel screening_kernel = ScreeningKernel::kAuto;
  // The CUDA Transformer kernels' attention (kernels/transformer_kernels.h), as
  // screening_kernel: kAuto gives way to MULTISCREEN_ATTENTION_KERNEL (auto|simple|tiled).
  AttentionKernel attention_kernel = AttentionKernel::kAuto;
  // The CUDA table under kBf16 on the tiled screening kernels: the forward writes U as W_O's
  // bf16 GEMM operand itself (KernelTable::ScreeningForwardOperand; issue 42). false: fp32 U,
  // then PackRounded (the earlier form, the same bits; kept for the tests' bit-for-bit check).
  bool screening_u_operand = true;
  // Whether the CUDA table's bf16 tiled backward writes ∂L/∂P straight as the projections'
  // bf16 GEMM operand (KernelTable::ScreeningBackwardToOperand; issue 42). false: in fp32, for
  // the caller to pack, the form that replaced, which tests compare with it bit for bit.
  bool screening_gradient_operand = true;
};

namespace kernels {

// A matrix that many GEMMs read as their B operand (the decoders' weights, token after
// token; the training step's weights, every micro-batch's forward and backward), held in
// the form the table's GemmPacked reads in `precision`, so that no GEMM converts it
// again: made once by KernelTable::PackOperand. Which member holds it is the table's
// business; callers pass it whole.
template <typename Real>
struct PackedOperand {
  Precision precision = Precision::kFp32;
  int64_t size = 0;              // elements
  const Real* values = nullptr;  // its Real values: the source itself (kFp32) or `rounded`'s; null where `half` holds it
  DeviceArray<Real> rounded;     // the source rounded to the precision, in Real (the CPU's 16-bit operands)
  DeviceArray<uint16_t> half;    // the precision's 16-bit format itself (a device's 16-bit operands)
};

// The single-rank softmax cross-entropy head (spec steps 14–15 after PLNorm), fused over
// row chunks so that no [rows, V] logits matrix is held whole:
//   z = scale · y Ēᵀ, lse_r = log Σ_v exp z_rv, target_logit_r = z_{r,t_r};
// with dy non-null also the gradient of Σ_r coef · (lse_r − target_logit_r):
//   dy = coef · scale · (softmax − onehot) Ē written, d_e_bar += coef · scale ·
//   (softmax − onehot)ᵀ y.
template <typename Real>
struct HeadLossArgs {
  const Real* y = nullptr;        // [rows, d_e] device: the GEMM operand (compute precision)
  const Real* e_bar = nullptr;    // [vocab, d_e] device: Ē as the GEMMs see it
  int64_t rows = 0, vocab = 0, d_e = 0;
  Real scale = 1;                 // e^{s_F}
  double shift = 0;               // a bound ≥ every logit used as the softmax shift (< 40), or NaN: row max
  const int64_t* target = nullptr;  // [rows] host: column of row r's target, or −1 (none)
  Real coef = 0;                  // loss weight per row (grad_scale / rows)
  // [rows] host, written; or both null (the single-rank head only): the rows' mean loss
  // HeadMeanLoss(lse, target_logit, rows) is added to the table's loss sum instead, where
  // the head runs, and nothing is read back (KernelTable::TakeHeadLoss reads the sum).
  double* lse = nullptr;
  double* target_logit = nullptr;  // [rows] host, written (0 where target < 0)
  Real* dy = nullptr;             // [rows, d_e] device, written; null: the loss alone
  Real* d_e_bar = nullptr;        // [vocab, d_e] device, added to (with dy)
  Precision precision = Precision::kFp32;  // the step's, as for Gemm (a device may run 16-bit products)
  // Ē as PackOperand packed it in `precision` (the values of e_bar), which a device's
  // products read instead of converting e_bar again in every chunk; null: e_bar is
  // converted per product. The CPU's head reads e_bar (PrepareHead's panels).
  const PackedOperand<Real>* e_bar_packed = nullptr;
};

// The mean loss of a head's rows: (Σ_r (lse_r − target_logit_r)) / rows, summed in row
// order in fp64 — the one definition the hosts' and a device's loss sums follow bit for bit.
inline double HeadMeanLoss(const double* lse, const double* target_logit, int64_t rows) {
  double loss = 0;
  for (int64_t r = 0; r < rows; ++r) loss += lse[r] - target_logit[r];
  return loss / double(rows);
}

// Aborts (a caller's bug) unless a and b were packed in one precision: GemmBothPacked's check.
template <typename Real>
void CheckSamePrecision(const PackedOperand<Real>& a, const PackedOperand<Real>& b) {
  if (a.precision == b.precision) return;
  std::fprintf(stderr, "multiscreen: internal error: GemmBothPacked on operands packed in two precisions\n");
  std::abort();
}

// How KernelTable::GemmPacked reads its A operand (a itself is never written).
enum class PackedGemmA {
  // Rounded to the packed B's precision on every device: a decoder's activation rows,
  // which nothing else rounds.
  kRounded,
  // As Gemm reads it: under kBf16 rounded to bf16 on every device (a backward gradient
  // too); under kFp16 the CPU as given (the caller rounds where the precision asks), a device
  // converted to 16 bits as Gemm converts it. The training step's operands: bit for bit Gemm
  // on B's values.
  kAsGemm,
};

// AdamW as trainer/adamw.h defines it (torch.optim.AdamW), one fused pass over
// n fp32 masters, gradients and moments; the caller has counted the step.
struct AdamWArgs {
  double lr = 0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0;
  int64_t step = 1;                  // the update's number t ≥ 1 (bias corrections)
  const uint8_t* decay = nullptr;    // [n] device: nonzero where weight decay applies; null: everywhere
};

// The arguments of one Copy2DBatched (KernelTable::Copy2DJobs): `count` blocks [rows,
// cols], block b of src + b·src_stride (row stride ld_src) to dst + b·dst_stride (row
// stride ld_dst), strides in elements.
template <typename Real>
struct Copy2DJob {
  const Real* src = nullptr;
  int64_t ld_src = 0, src_stride = 0, rows = 0, cols = 0, count = 0;
  Real* dst = nullptr;
  int64_t ld_dst = 0, dst_stride = 0;
};
// Most jobs of one KernelTable::Copy2DJobs call (a Multiscreen layer's four projections).
inline constexpr int kMaxCopy2DJobs = 4;

// Aborts (a caller's bug) unless 0 ≤ n ≤ kMaxCopy2DJobs: Copy2DJobs' check.
inline void CheckCopy2DJobs(int n) {
  if (n >= 0 && n <= kMaxCopy2DJobs) return;
  std::fprintf(stderr, "multiscreen: internal error: Copy2DJobs with %d jobs (at most %d)\n", n, kMaxCopy2DJobs);
  std::abort();
}

// An executable graph of a device's ops (KernelTable::EndCapture), released with it.
class CapturedGraph {
 public:
  virtual ~CapturedGraph() = default;
};

template <typename Real>
class KernelTable {
 public:
  virtual ~KernelTable() = default;
  virtual Device device() const = 0;

  // ---- memory (n elements; pointers on device() unless named host) ----------------
  virtual void Upload(const Real* host, int64_t n, Real* dst) = 0;
  virtual void Download(const Real* src, int64_t n, Real* host) = 0;
  // host ← the elements of src at the `count` ranges [begin[i], begin[i] + length[i]),
  // one range after another, with one wait: a step's few host scalars read at once (a
  // device gathers them and copies once; the CPU's: Download each).
  virtual void DownloadRanges(const Real* src, const int64_t* begin, const int64_t* length, int64_t count,
                              Real* host) {
    for (int64_t i = 0; i < count; ++i) {
      Download(src + begin[i], length[i], host);
      host += length[i];
    }
  }
  virtual void Copy(const Real* src, int64_t n, Real* dst) = 0;  // may not overlap
  virtual void Fill(Real* dst, int64_t n, Real value) = 0;
  // dst[i] += src[i].
  virtual void AddInto(const Real* src, int64_t n, Real* dst) = 0;
  // dst[i] += host[i] (a few gradient scalars computed on the host).
  virtual void AddHost(const Real* host, int64_t n, Real* dst) = 0;
  // `count` blocks [rows, cols] copied into / added to dst, one launch on a device:
  // block b is [rows, cols] of src + b·src_stride (row stride ld_src) and goes to
  // dst + b·dst_stride (row stride ld_dst); strides in elements. E.g. the tiles' W_Q
  // [tiles, d_E, d_K] into the W_Q columns of the packed [d_E, tiles·C] matrix:
  // (W_Q, d_K, d_E·d_K, d_E, d_K, tiles, w_cat, tiles·C, C). Each element is written
  // once, so the result is the loop of single blocks b = 0, 1, … bit for bit. The
  // destination blocks may overlap neither one another nor any source block.
  void Copy2DBatched(const Real* src, int64_t ld_src, int64_t src_stride, int64_t rows, int64_t cols, int64_t count,
                     Real* dst, int64_t ld_dst, int64_t dst_stride) {
    const Copy2DJob<Real> job{src, ld_src, src_stride, rows, cols, count, dst, ld_dst, dst_stride};
    Copy2DJobs(&job, 1, /*accumulate=*/false);
  }
  void Add2DBatched(const Real* src, int64_t ld_src, int64_t src_stride, int64_t rows, int64_t cols, int64_t count,
                    Real* dst, int64_t ld_dst, int64_t dst_stride) {
    const Copy2DJob<Real> job{src, ld_src, src_stride, rows, cols, count, dst, ld_dst, dst_stride};
    Copy2DJobs(&job, 1, /*accumulate=*/true);
  }
  // jobs[0, n), n ≤ kMaxCopy2DJobs, each a Copy2DBatched (Add2DBatched when accumulate)
  // of its own arguments, all in one launch on a device: a layer's W_Q, W_K, W_V, W_G
  // packed into W_cat, or ∂W_cat added back into their gradients, at once. The result is
  // the n calls' bit for bit (each element is written or added once); no destination
  // block may overlap another job's, nor any source block.
  virtual void Copy2DJobs(const Copy2DJob<Real>* jobs, int n, bool accumulate) = 0;
  // One block [rows, cols] of src (row stride ld_src) copied into / added to dst (ld_dst).
  void Copy2D(const Real* src, int64_t ld_src, int64_t rows, int64_t cols, Real* dst, int64_t ld_dst) {
    Copy2DBatched(src, ld_src, 0, rows, cols, 1, dst, ld_dst, 0);
  }
  void Add2D(const Real* src, int64_t ld_src, int64_t rows, int64_t cols, Real* dst, int64_t ld_dst) {
    Add2DBatched(src, ld_src, 0, rows, cols, 1, dst, ld_dst, 0);
  }
  // Σ_i a_i b_i accumulated in fp64 (the order is the implementation's; the CPU's is i = 0, 1, …).
  virtual double Dot(const Real* a, const Real* b, int64_t n) = 0;
  // dst[0] += Real(Dot(a, b, n)): the same sum, added into a device scalar (a gradient)
  // without the host reading it, so a device does not wait. The CPU's is Dot then AddHost.
  virtual void DotAddInto(const Real* a, const Real* b, int64_t n, Real* dst) {
    const Real sum = static_cast<Real>(Dot(a, b, n));
    AddHost(&sum, 1, dst);
  }
  // init + Σ_i x_i² in fp64 (the global gradient norm's part of this buffer; init carries
  // the sum over the buffers before it). The CPU sums blocks of 2^16 terms on its threads and
  // adds them to init in order (kernels/cpu/sum_squares.h: the same bits for any thread
  // count); a device reduces Σ its own way and adds init.
  virtual double SumSquares(const Real* x, int64_t n, double init = 0) = 0;
  // Whether every x_i is finite (fp16 loss scaling's overflow check).
  virtual bool AllFinite(const Real* x, int64_t n) = 0;
  // The index of the largest x_i (kernels/cpu/argmax.h: the lowest index on ties, the
  // first NaN if any), in host memory: a device takes it there and copies one int32 back
  // (greedy decoding's next token without the logits crossing). −1 when n ≤ 0; n < 2^31.
  virtual int64_t Argmax(const Real* x, int64_t n) = 0;
  // x_i ← x_i · factor.
  virtual void Scale(Real* x, int64_t n, Real factor) = 0;
  // x[i] ← the value x[i] has in `precision`'s 16-bit format (no-op for kFp32 or double).
  virtual void RoundTo(Precision precision, Real* x, int64_t n) = 0;

  // ---- the model's kernels --------------------------------------------------------
  // kernels/cpu/unit_rows.h: y = x/max(‖x‖, floor) per row, norm [rows] (may be null); backward.
  virtual void UnitRowsForward(const Real* x, int64_t ldx, Real* y, int64_t ldy, Real* norm, int64_t rows,
                               int64_t d) = 0;
  virtual void UnitRowsBackward(const Real* y, int64_t ldy, const Real* norm, const Real* dy, int64_t lddy, Real* dx,
                                int64_t lddx, int64_t rows, int64_t d, bool accumulate) = 0;
  // kernels/cpu/embedding.h: out [count, d] = scale · table[ids − v0] (0 outside [v0, v1));
  // backward adds scale · dout into dtable rows, deterministically (repeated ids sum in
  // one fixed order). ids: host.
  virtual void EmbeddingForward(const Real* table, int64_t v0, int64_t v1, int64_t d, const int32_t* ids,
                                int64_t count, Real scale, Real* out) = 0;
  virtual void EmbeddingBackward(const Real* dout, const int32_t* ids, int64_t count, int64_t v0, int64_t v1,
                                 int64_t d, Real scale, Real* dtable) = 0;
  // C[m, n] = alpha · op(A) · op(B) + beta · C, row-major (kernels/cpu/gemm.h). `precision`
  // is the step's: under kBf16 A and B are rounded to bf16 and multiplied with fp32
  // accumulation on every device (the CPU's bf16 dot products where it has them,
  // kernels/cpu/gemm_bf16.h); under kFp16 the caller has rounded A and B where the CPU does
  // and a device runs 16-bit operands; under kFp32 the product is exact fp32 (no TF32).
  virtual void Gemm(Precision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, Real alpha,
                    const Real* a, int64_t lda, const Real* b, int64_t ldb, Real beta, Real* c, int64_t ldc) = 0;
  // `src` [n] (on device()) as the B operand of GemmPacked in `precision`, into *out,
  // once: values src's rounded as RoundTo rounds, held as the table chooses (a device: a
  // 16-bit copy, one launch). The table may read src itself instead of a copy (under
  // kFp32 always): keep src alive and unchanged while *out is used.
  virtual void PackOperand(Precision precision, const Real* src, int64_t n, PackedOperand<Real>* out) = 0;
  // Gemm in b.precision with B packed by PackOperand (ldb: the row stride B has in the
  // source it was packed from; op(B) by trans_b as Gemm's) and A read as `read_a` says
  // (PackedGemmA; a itself unchanged, so the caller need not round a copy): bit for bit
  // Gemm(b.precision, ...) on B's rounded values and A as read_a makes it (kRounded:
  // RoundTo on a copy of A; on a device for a compact B, ldb its row length, as Gemm
  // packs it). A device converts A alone (one launch for its [m, k] elements), never B.
  virtual void GemmPacked(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, Real alpha, const Real* a,
                          int64_t lda, PackedGemmA read_a, const PackedOperand<Real>& b, int64_t ldb, Real beta,
                          Real* c, int64_t ldc) = 0;
  // x [n] (on device()) rounded in place to `precision` as RoundTo rounds it and held
  // in *out as a GEMM operand of that precision, in one pass: a step's activation that
  // more than one GEMM reads (the forward's product, the backward's weight gradient),
  // converted once. A device writes the rounded values and their 16-bit copy in one
  // launch; the CPU reads x itself. Keep x alive and unchanged while *out is used.
  virtual void PackRounded(Precision precision, Real* x, int64_t n, PackedOperand<Real>* out) = 0;
  // Copy2DJobs(jobs, n, false) into dst [n_dst] (the jobs' blocks cover it, each element
  // once), then PackRounded(precision, dst, n_dst, out), *out bit for bit the two calls':
  // a layer's W_Q, W_K, W_V, W_G packed into W_cat, or W_O, as the step's GEMM operand.
  // A device under kBf16 and kFp16 writes out's 16-bit copy alone (one launch, fp32 read
  // once, 16 bits written) and leaves dst unwritten: nothing may read dst then (*out does
  // not; out->values is null). The CPU and kFp32 write dst and *out reads it, as the two
  // calls do: keep dst alive and unchanged while *out is used.
  virtual void PackJobsRounded(Precision precision, const Copy2DJob<Real>* jobs, int n, Real* dst, int64_t n_dst,
                               PackedOperand<Real>* out) {
    Copy2DJobs(jobs, n, /*accumulate=*/false);
    PackRounded(precision, dst, n_dst, out);
  }
  // `src` [n] (on device()) as a GEMM operand read as Gemm reads it in `precision`
  // (PackedGemmA::kAsGemm: under kBf16 rounded to bf16, once; under kFp16 the CPU as given,
  // a device converted to 16 bits, once, one launch). A step's gradient that two
  // GEMMs read (∂X = ∂Y·Wᵀ and ∂W = Xᵀ∂Y). Keep src alive and unchanged while *out is used.
  virtual void PackAsGemm(Precision precision, const Real* src, int64_t n, PackedOperand<Real>* out) = 0;
  // Gemm on two packed operands of one precision (PackOperand, PackRounded, PackAsGemm;
  // lda, ldb: the row strides of the sources they were packed from, op(·) by trans_a,
  // trans_b as Gemm's): Gemm(a.precision, ...) on their values. A device converts
  // nothing. Operands of two precisions are a caller's bug (aborts).
  virtual void GemmBothPacked(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, Real alpha,
                              const PackedOperand<Real>& a, int64_t lda, const PackedOperand<Real>& b, int64_t ldb,
                              Real beta, Real* c, int64_t ldc) = 0;
  // b[j, i] += a[i, j], then a = 0 (kernels/cpu/gemm.h).
  virtual void MoveAddTransposed(Real* a, int64_t rows, int64_t cols, int64_t lda, Real* b, int64_t ldb) = 0;
  // P = x·W_cat (spec step 3; x [rows, k] and w [k, cols] packed in one precision, row
  // strides k and cols) into P's memory for ScreeningForward and ScreeningBackward of `shape`,
  // in the format this table's screening kernels read: true when it wrote bf16 (the caller
  // sets shape.p_bf16 for those calls), false when fp32 holding the values rounded to the
  // operands' precision. The default: GemmBothPacked, then RoundTo (false). The values are
  // the same either way (a 16-bit D is the fp32 product rounded once to nearest even).
  virtual bool ScreeningProjection(const ScreeningShape& shape, int64_t rows, int64_t cols, int64_t k,
                                   const PackedOperand<Real>& x, const PackedOperand<Real>& w, Real* P) {
    (void)shape;
    GemmBothPacked(false, false, rows, cols, k, Real(1), x, k, w, cols, Real(0), P, cols);
    RoundTo(x.precision, P, rows * cols);
    return false;
  }
  // kernels/cpu/screening.h: tiles and grads are host arrays of shape.tiles.
  virtual void ScreeningForward(const ScreeningShape& shape, const Real* P, const TileScalars* tiles,
                                const ScreeningSaved<Real>& saved, Real* U) = 0;
  // The forward as the step runs it (spec steps 5–13, then U as the operand of step 13's
  // Δ = U·W_O): ScreeningForward into U [B·T, tiles·d_V] (shape.batch·shape.seq rows), then
  // PackRounded(precision, U, that many elements, u_op), so that U·W_O and the backward's
  // Uᵀ·∂x read *u_op. That is the default (U holds the values rounded to `precision`). A
  // table may instead have its screening kernel write the operand itself (the CUDA table
  // under kBf16 on the tiled kernels, shape.p_bf16: the forward's epilogue stores U in bf16,
  // each value rounded once to nearest even, the bits PackRounded writes; issue 42) and
  // leave U unwritten (u_op->values null, as PackJobsRounded leaves dst): nothing may read U
  // after this call but through *u_op; saved (h) is written either way. Keep U alive and
  // unchanged while *u_op is used.
  virtual void ScreeningForwardOperand(Precision precision, const ScreeningShape& shape, const Real* P,
                                       const TileScalars* tiles, const ScreeningSaved<Real>& saved, Real* U,
                                       PackedOperand<Real>* u_op) {
    ScreeningForward(shape, P, tiles, saved, U);
    PackRounded(precision, U, shape.batch * shape.seq * shape.tiles * shape.d_v, u_op);
  }
  virtual void ScreeningBackward(const ScreeningShape& shape, const Real* P, const TileScalars* tiles,
                                 const ScreeningSaved<Real>& saved, const Real* dU, Real* dP,
                                 TileScalarGrads* grads) = 0;
  // ScreeningBackward with the tiles' learned-scalar gradients added into device memory
  // instead of returned to the host: g_sw[t] += ∂L/∂s_w, g_sr[t] += ∂L/∂s_r, g_so[t] +=
  // ∂L/∂s_O (g_so may be null), TileScalarParamGrads (screening_types.h) of
  // ScreeningBackward's grads bit for bit. A device computes them where its kernels leave
  // their sums and does not wait; the CPU's is ScreeningBackward, then AddHost.
  // A new optimizer step: the tiles' scalars (and so the tables ScreeningForward and
  // ScreeningBackward derive from them) may have changed. A device that keeps those tables
  // between calls (the CUDA table: kernels/cuda/screening_table_cache.h) may recycle the
  // ones of earlier steps from here on; nothing to do on the CPU. Called by the models'
  // BeginStep; calls that never follow one stay correct (the tables are matched by content).
  virtual void BeginScreeningStep() {}
  // Makes ready now what ScreeningForward and ScreeningBackward of (shape, tiles) would
  // otherwise prepare at their first call: a device that keeps the per-tile tables (the CUDA
  // table's cache) uploads them here when it has none of this content, so that the calls
  // then copy nothing and can be captured into a graph that is the same every step (bench
  // train --graphs, before a step's first micro-batch is captured). Nothing on the CPU.
  virtual void PrepareScreeningTables(const ScreeningShape& shape, const TileScalars* tiles) {
    (void)shape, (void)tiles;
  }
  virtual void ScreeningBackwardAddParamGrads(const ScreeningShape& shape, const Real* P, const TileScalars* tiles,
                                              const ScreeningSaved<Real>& saved, const Real* dU, Real* dP, Real* g_sw,
                                              Real* g_sr, Real* g_so) {
    const int64_t nt = shape.tiles;
    std::vector<TileScalarGrads> grads(nt);
    ScreeningBackward(shape, P, tiles, saved, dU, dP, grads.data());
    std::vector<Real> g(3 * nt);
    TileScalarParamGrads(tiles, grads.data(), nt, g.data(), g.data() + nt, g_so != nullptr ? g.data() + 2 * nt : nullptr);
    AddHost(g.data(), nt, g_sw);
    AddHost(g.data() + nt, nt, g_sr);
    if (g_so != nullptr) AddHost(g.data() + 2 * nt, nt, g_so);
  }
  // ScreeningBackwardAddParamGrads with ∂L/∂P wanted as the operand of the projections' two
  // GEMMs (∂W_cat = x_inᵀ·∂P, ∂x += ∂P·W_catᵀ; spec step 3 backward) in `precision`, the
  // step's. Returns false when it wrote ∂L/∂P [B·T, tiles·p_cols()] in fp32 into *dP (resized
  // to that; the default: ScreeningBackwardAddParamGrads), *dp_op untouched: the caller makes
  // the operand (PackAsGemm, after any rounding its precision asks for). Returns true when the
  // screening backward wrote the operand itself into *dp_op, bit for bit what
  // PackAsGemm(precision, ·) makes of the fp32 ∂L/∂P (each value rounded once to nearest
  // even), and left *dP untouched (not even resized): the CUDA table under bf16 with P in bf16
  // (shape.p_bf16) unless KernelOptions::screening_gradient_operand is off, no fp32 ∂L/∂P and
  // no pack pass (issue 42). The tile scalars' gradients are added as
  // ScreeningBackwardAddParamGrads adds them either way.
  virtual bool ScreeningBackwardToOperand(const ScreeningShape& shape, Precision precision, const Real* P,
                                          const TileScalars* tiles, const ScreeningSaved<Real>& saved,
                                          const Real* dU, DeviceArray<Real>* dP, PackedOperand<Real>* dp_op,
                                          Real* g_sw, Real* g_sr, Real* g_so) {
    (void)precision, (void)dp_op;
    dP->Resize(shape.batch * shape.seq * shape.tiles * shape.p_cols());
    ScreeningBackwardAddParamGrads(shape, P, tiles, saved, dU, dP->data(), g_sw, g_sr, g_so);
    return false;
  }

  // ---- the vocabulary head ------------------------------------------------------------
  // Called once per step with Ē as the head's GEMMs see it, before HeadLoss (the CPU
  // packs it into panels here).
  virtual void PrepareHead(const Real* e_bar, int64_t vocab, int64_t d_e) = 0;
  // The single-rank fused head (HeadLossArgs).
  virtual void HeadLoss(const HeadLossArgs<Real>& args) = 0;
  // The loss sum of the HeadLoss calls made since the last take with lse and target_logit
  // null: 0 + each call's HeadMeanLoss in call order (fp64). Returns it and restarts the sum
  // at 0; a device waits for its work before the read (one host synchronization per take).
  virtual double TakeHeadLoss() = 0;
  // The vocabulary-parallel head's pieces (a tp group all-reduces between them):
  // kernels/cpu/cross_entropy.h's SoftmaxStats and CrossEntropyGrad over logits z
  // [rows, V] (device), with row_max, row_sum, lse and target host arrays; TargetLogits
  // writes out[r] = z[r, target[r]] where target[r] ≥ 0.
  virtual void SoftmaxStats(const Real* z, int64_t ld, int64_t rows, int64_t V, double* row_max,
                            double* row_sum) = 0;
  virtual void TargetLogits(const Real* z, int64_t ld, int64_t rows, const int64_t* target, double* out) = 0;
  virtual void CrossEntropyGrad(Real* z, int64_t ld, int64_t rows, int64_t V, const double* lse,
                                const int64_t* target, Real coef) = 0;

  // ---- the optimizer ------------------------------------------------------------------
  // One AdamW update of params [n] from grads [n] with moments m, v [n] (all device).
  virtual void AdamW(const AdamWArgs& args, Real* params, const Real* grads, Real* m, Real* v, int64_t n) = 0;

  // Waits for every op issued so far (for timers; host results already wait).
  virtual void Synchronize() = 0;

  // ---- one captured micro-step (CUDA graphs; `bench train --graphs`, issue 42) ----------
  // A micro-batch's token ids and the head's targets (shard-local columns, −1: none), [n]
  // each (host), copied now to the buffers EmbeddingForward and HeadLoss read; their next
  // calls given the same values copy nothing, so a micro-step captured after this reads
  // inputs copied by the next micro-batch's PreloadInputs, issued before its launch. The
  // CPU reads the host arrays: nothing to do.
  virtual void PreloadInputs(const int32_t* ids, const int64_t* targets, int64_t n) {
    (void)ids, (void)targets, (void)n;
  }
  // Whether BeginCapture, EndCapture and LaunchGraph work here (a CUDA device: yes).
  virtual bool CanCapture() const { return false; }
  // From BeginCapture to EndCapture the device's stream (every table of the device issues
  // on it) records the ops issued instead of running them; EndCapture returns them as an
  // executable graph that LaunchGraph runs, each op with the arguments and addresses of
  // its capture. A host wait in between is an error of the device's (fatal, naming
  // EndCapture). A device without capture aborts (a caller's bug: ask CanCapture).
  virtual void BeginCapture() { NoCapture("BeginCapture"); }
  virtual std::unique_ptr<CapturedGraph> EndCapture() {
    NoCapture("EndCapture");
    return nullptr;
  }
  virtual void LaunchGraph(const CapturedGraph& graph) {
    (void)graph;
    NoCapture("LaunchGraph");
  }
  // EndCapture into *graph, which may hold an executable graph of an earlier capture: that
  // one is updated in place from this capture (cudaGraphExecUpdate: the same ops in the same
  // order, their arguments, scalars and addresses this capture's) and true returned; when
  // *graph is empty, or the update is refused (the ops differ: another topology), *graph
  // becomes a new instantiation of this capture and false is returned. Launches issued
  // before run the graph they were issued with. Other failures are fatal, as EndCapture's.
  virtual bool EndCaptureInto(std::unique_ptr<CapturedGraph>* graph) {
    (void)graph;
    NoCapture("EndCaptureInto");
  }

 private:
  [[noreturn]] static void NoCapture(const char* op) {
    std::fprintf(stderr, "multiscreen: internal error: KernelTable::%s on a device without graph capture\n", op);
    std::abort();
  }
};

}  // namespace kernels

// The kernel table of `device` for Real. Errors: CUDA for double (the GPU path is fp32
// with 16-bit compute), a build without CUDA, no device visible, a driver too old (with
// the CUDA runtime's message).
template <typename Real>
absl::StatusOr<std::unique_ptr<kernels::KernelTable<Real>>> MakeKernelTable(Device device,
                                                                            const KernelOptions& options = {});

}  // namespace multiscreen
