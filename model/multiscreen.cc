#include "model/multiscreen.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>

#include "kernels/cpu/head_loss.h"
#include "model/residual.h"

namespace multiscreen {
namespace {
// Logits' GEMM reads its activation rows as Gemm does (KernelTable::GemmPacked). The
// step's GEMMs read every operand packed once (GemmBothPacked): weights per step,
// activations and gradients per micro-batch; their values are those Gemm reads.
constexpr auto kAsGemm = kernels::PackedGemmA::kAsGemm;

// The head's targets [n] as columns of the shard's vocabulary rows (−1: another shard's).
void LocalTargets(const ShardSpec& shard, const int32_t* targets, int64_t n, std::vector<int64_t>* out) {
  out->resize(n);
  for (int64_t r = 0; r < n; ++r) {
    (*out)[r] = targets[r] >= shard.vocab_begin && targets[r] < shard.vocab_end ? targets[r] - shard.vocab_begin : -1;
  }
}
}  // namespace


template <typename Real>
kernels::ScreeningSaved<Real> Multiscreen<Real>::LayerActivations::saved() {
  return {q_tilde.data(), k_tilde.data(), v_bar.data(), q_norm.data(), k_norm.data(), v_norm.data(), h.data(),
          gate.empty() ? nullptr : gate.data()};
}

template <typename Real>
Multiscreen<Real>::Multiscreen(const ModelDims& dims, const ShardSpec& shard, ModelOptions options, Communicator* tp)
    : ModelStage<Real>(options.device),
      layout_(dims, shard),
      options_(options),
      ops_(KernelTableFor<Real>(options)),
      tp_(tp != nullptr ? tp : &single_),
      e_bar_(options.device),
      e_norm_(options.device),
      d_e_bar_(options.device),
      e_bar_compute_(options.device),
      d_u_(options.device),
      d_p_(options.device),
      d_w_cat_(options.device),
      d_delta_(options.device),
      scratch_x_(options.device),
      head_(options.device),
      zero_(options.device),
      step_x0_(options.device),
      logits_(options.device) {
  if (dims.transformer()) {
    FatalModelError("model " + dims.name + " is a Transformer: this command runs Multiscreen models only");
  }
  for (int64_t li = 0; li < shard.layers(); ++li) {
    weights_.emplace_back(options.device);
    acts_.emplace_back(options.device);
  }
  zero_.Resize(1);
  ops_->Fill(zero_.data(), 1, Real(0));
}

template <typename Real>
void Multiscreen<Real>::RoundToCompute(Real* data, int64_t n) const {
  ops_->RoundTo(options_.precision, data, n);
}

template <typename Real>
void Multiscreen<Real>::RoundGradientToCompute(Real* data, int64_t n) const {
  if (options_.precision == Precision::kFp16) ops_->RoundTo(options_.precision, data, n);
}

template <typename Real>
kernels::ScreeningShape Multiscreen<Real>::ShapeOf(int64_t B, int64_t T) const {
  kernels::ScreeningShape s = MultiscreenShape(dims(), layout_.shard().tiles(), B, T, nullptr);
  s.rope_scaling = rope_scaling_;
  return s;
}

template <typename Real>
std::vector<kernels::TileScalars> Multiscreen<Real>::TileScalarsOf(int64_t li,
                                                                   const InferenceOptions* inference) const {
  const LayerWeights& w = weights_[li];
  return MapTileScalars(w.s_w.data(), w.s_r.data(), w.s_o.data(), layout_.shard().tiles(), inference);
}

template <typename Real>
void Multiscreen<Real>::BeginStep(const Real* params) {
  PhaseTimer timer(options_.profile, StepProfile::kEmbed);
  const ShardSpec& shard = layout_.shard();
  const int64_t dE = dims().d_e, nt = shard.tiles();
  const auto& entries = layout_.entries();
  // The host's scalars, read with one wait: s_E, s_F, and every layer's s_w, s_r, s_O
  // (adjacent in the layout, ParamLayout) for the screening kernels' tile tables.
  std::vector<int64_t> begin, length;
  auto read = [&](int64_t offset, int64_t n) {
    begin.push_back(offset);
    length.push_back(n);
  };
  if (shard.embed) read(layout_.Find("embed/s_E")->buffer_offset, 1);
  if (shard.head) read(layout_.Find("head/s_F")->buffer_offset, 1);
  for (int64_t li = 0; li < shard.layers(); ++li) {
    read(entries[layout_.MultiscreenEntry(shard.layer_begin + li, kSw)].buffer_offset, 3 * nt);
  }
  std::vector<Real> scalars(2 + 3 * nt * shard.layers());
  ops_->DownloadRanges(params, begin.data(), length.data(), static_cast<int64_t>(begin.size()), scalars.data());
  const Real* next = scalars.data();
  if (shard.embed) s_e_ = *next++;
  if (shard.head) s_f_ = *next++;
  for (int64_t li = 0; li < shard.layers(); ++li) {
    LayerWeights& w = weights_[li];
    w.s_w.assign(next, next + nt);
    w.s_r.assign(next + nt, next + 2 * nt);
    w.s_o.assign(next + 2 * nt, next + 3 * nt);
    next += 3 * nt;
  }
  ops_->BeginScreeningStep();  // the tile tables of earlier steps may be recycled (kernel_table.h)
  if (shard.embed || shard.head) {
    const ParamEntry* w_e = layout_.Find("embed/W_E");
    const int64_t rows = shard.vocab();
    e_bar_.Resize(rows * dE);
    e_norm_.Resize(rows);
    if (!options_.forward_only) {
      d_e_bar_.Resize(rows * dE);
      ops_->Fill(d_e_bar_.data(), rows * dE, Real(0));
    }
    ops_->UnitRowsForward(params + w_e->buffer_offset, dE, e_bar_.data(), dE, e_norm_.data(), rows, dE);
    if (options_.precision == Precision::kFp32) {
      if (shard.head) ops_->PackOperand(options_.precision, e_bar_.data(), rows * dE, &e_bar_op_);
    } else {
      e_bar_compute_.Resize(rows * dE);
      ops_->Copy(e_bar_.data(), rows * dE, e_bar_compute_.data());
      // Rounded in place and, for the head's GEMMs, packed in the same pass (the CPU's bf16
      // products: one threaded pass writes the rounded values and their bf16 copy).
      if (shard.head) {
        ops_->PackRounded(options_.precision, e_bar_compute_.data(), rows * dE, &e_bar_op_);
      } else {
        RoundToCompute(e_bar_compute_.data(), rows * dE);
      }
    }
    // Ē as the single-rank head sees it, once per step however many micro-batches.
    if (shard.head && tp_->size() == 1) ops_->PrepareHead(EBarCompute(), rows, dE);
  }
  for (int64_t li = 0; li < shard.layers(); ++li) {
    LayerWeights& w = weights_[li];
    const int64_t layer = shard.layer_begin + li;
    // Read from the parameters straight into the GEMMs' operands: under 16 bits on a
    // device w_cat and w_o stay unwritten (KernelTable::PackJobsRounded).
    PackProjectionsRounded(*ops_, layout_, params, layer, options_.precision, &w.w_cat, &w.w_cat_op);
    const ParamEntry& w_o = entries[layout_.MultiscreenEntry(layer, kWO)];
    const int64_t n_o = w_o.size();
    w.w_o.Resize(n_o);
    const kernels::Copy2DJob<Real> w_o_job{params + w_o.buffer_offset, n_o, 0, 1, n_o, 1, w.w_o.data(), n_o, 0};
    ops_->PackJobsRounded(options_.precision, &w_o_job, 1, w.w_o.data(), n_o, &w.w_o_op);
  }
}

template <typename Real>
void Multiscreen<Real>::ZeroGradientsBeforeStep(Real* grads) {
  const ShardSpec& shard = layout_.shard();
  const auto& entries = layout_.entries();
  // `count` blocks of `n` consecutive zeros at dst + b·stride, each element read from
  // zero_[0] (a column of n rows, ld_src = src_stride = 0).
  auto zeros = [&](int64_t offset, int64_t n, int64_t count, int64_t stride) {
    return kernels::Copy2DJob<Real>{zero_.data(), 0, 0, n, 1, count, grads + offset, 1, stride};
  };
  kernels::Copy2DJob<Real> jobs[2];
  int n = 0;
  // s_E and s_F follow W_E at the layout's start (ParamLayout): one block.
  const ParamEntry* s_e = layout_.Find("embed/s_E");
  const ParamEntry* s_f = layout_.Find("head/s_F");
  if (s_e != nullptr || s_f != nullptr) {
    jobs[n++] = zeros((s_e != nullptr ? s_e : s_f)->buffer_offset, (s_e != nullptr) + (s_f != nullptr), 1, 0);
  }
  // Each layer's s_w, s_r, s_O (adjacent: 3·tiles) at the layers' fixed stride.
  const int64_t layers = shard.layers();
  if (layers > 0) {
    auto s_w = [&](int64_t li) { return entries[layout_.MultiscreenEntry(shard.layer_begin + li, kSw)].buffer_offset; };
    jobs[n++] = zeros(s_w(0), 3 * shard.tiles(), layers, layers > 1 ? s_w(1) - s_w(0) : 0);
  }
  ops_->Copy2DJobs(jobs, n, /*accumulate=*/false);
  overwrite_layer_grads_ = layers > 0;
  overwrite_w_e_ = shard.embed || shard.head;
}

template <typename Real>
void Multiscreen<Real>::Embed(const Real* params, const int32_t* ids, int64_t n, Real* x) {
  (void)params;  // s_E was read by BeginStep
  PhaseTimer timer(options_.profile, StepProfile::kEmbed);
  const ShardSpec& shard = layout_.shard();
  const Real scale = static_cast<Real>(std::exp(double(s_e_)));
  ops_->EmbeddingForward(EBarCompute(), shard.vocab_begin, shard.vocab_end, dims().d_e, ids, n, scale, x);
  tp_->AllReduce(x, n * dims().d_e, ReduceOp::kSum);
}

template <typename Real>
void Multiscreen<Real>::LayersForward(const Real* params, int64_t B, int64_t T, Real* x,
                                      const InferenceOptions* inference) {
  (void)params;  // BeginStep packed the weights and read the scalars
  const ModelDims& d = dims();
  const int64_t nt = layout_.shard().tiles(), dE = d.d_e, dK = d.d_k, dV = d.d_v;
  const int64_t rows = B * T, C = ShapeOf(B, T).p_cols();
  batch_ = B;
  seq_ = T;
  // YaRN at inference for position ROPE (MultiscreenShape): kept for a backward of this forward.
  rope_scaling_ = MultiscreenShape(d, nt, B, T, inference).rope_scaling;
  StepProfile* profile = options_.profile;
  for (int64_t li = 0; li < layout_.shard().layers(); ++li) {
    LayerActivations& a = acts_[li];
    const LayerWeights& w = weights_[li];
    std::optional<PhaseTimer> timer(std::in_place, profile, StepProfile::kProjections);
    a.x_in.Resize(rows * dE);
    ops_->Copy(x, rows * dE, a.x_in.data());
    a.P.Resize(rows * nt * C);
    a.U.Resize(rows * nt * dV);
    a.q_tilde.Resize(rows * nt * dK);
    a.k_tilde.Resize(rows * nt * dK);
    a.v_bar.Resize(rows * nt * dV);
    a.h.Resize(rows * nt * dV);
    a.q_norm.Resize(rows * nt);
    a.k_norm.Resize(rows * nt);
    a.v_norm.Resize(rows * nt);
    // For a backward (no InferenceOptions) the CPU kernels keep the gate and its derivative
    // (2·d_V a token and tile, as much as h and v̄ together); the CUDA kernels recompute them.
    const bool keep_gate = ops_->device() == Device::kCpu && d.output_gate && inference == nullptr;
    a.gate.Resize(keep_gate ? rows * nt * 2 * dV : 0);
    // P = x · [W_Q|W_K|W_V|W_G] for all local tiles: one GEMM (spec step 3), its values
    // rounded to the compute precision, in the format the table's screening kernels read
    // (a device may write it in bf16: ScreeningProjection). The stored x_in and U are the
    // GEMM operands, so they hold the compute precision (a device may write U's operand
    // alone: ScreeningForwardOperand; only a.u_op is read after it).
    ops_->PackRounded(options_.precision, a.x_in.data(), rows * dE, &a.x_in_op);
    a.p_bf16 = ops_->ScreeningProjection(ShapeOf(B, T), rows, nt * C, dE, a.x_in_op, w.w_cat_op, a.P.data());
    timer.emplace(profile, StepProfile::kScreeningForward);
    const auto tiles = TileScalarsOf(li, inference);
    kernels::ScreeningShape shape = ShapeOf(B, T);
    shape.p_bf16 = a.p_bf16;
    ops_->ScreeningForwardOperand(options_.precision, shape, a.P.data(), tiles.data(), a.saved(), a.U.data(),
                                  &a.u_op);
    timer.emplace(profile, StepProfile::kOutputGemm);
    // Δ = U · W_O (step 13), summed over the tp group's tiles; x += Δ (step 2).
    AddProductAcrossTp(*ops_, *tp_, false, false, rows, dE, nt * dV, a.u_op, nt * dV, w.w_o_op, dE, scratch_x_, x);
  }
}

template <typename Real>
double Multiscreen<Real>::HeadLoss(const Real* params, const Real* x, const int32_t* targets, int64_t n, Real* dx,
                                   Real* grads, double grad_scale, Real* token_losses) {
  (void)params;  // s_F was read by BeginStep
  return HeadPass(x, targets, n, dx, grads, grad_scale, token_losses, false);
}

template <typename Real>
void Multiscreen<Real>::HeadLossDeferred(const Real* params, const Real* x, const int32_t* targets, int64_t n,
                                         Real* dx, Real* grads, double grad_scale) {
  if (tp_->size() > 1) return ModelStage<Real>::HeadLossDeferred(params, x, targets, n, dx, grads, grad_scale);
  HeadPass(x, targets, n, dx, grads, grad_scale, nullptr, true);
}

template <typename Real>
double Multiscreen<Real>::TakeLoss() {
  return tp_->size() > 1 ? ModelStage<Real>::TakeLoss() : ops_->TakeHeadLoss();
}

template <typename Real>
double Multiscreen<Real>::HeadPass(const Real* x, const int32_t* targets, int64_t n, Real* dx, Real* grads,
                                   double grad_scale, Real* token_losses, bool deferred) {
  PhaseTimer timer(options_.profile, StepProfile::kHead);
  const ModelDims& d = dims();
  const ShardSpec& shard = layout_.shard();
  const int64_t dE = d.d_e, Vl = shard.vocab();
  const Real scale = static_cast<Real>(std::exp(double(s_f_)));
  HeadBuffers& hb = head_;
  // PLNorm (step 14): y = x/‖x‖.
  hb.y.Resize(n * dE);
  hb.y_norm.Resize(n);
  if (d.pl_norm) {
    ops_->UnitRowsForward(x, dE, hb.y.data(), dE, hb.y_norm.data(), n, dE);
  } else {
    ops_->Copy(x, n * dE, hb.y.data());
  }
  const Real* y_c = hb.y.data();  // the head GEMMs' operand
  if (options_.precision != Precision::kFp32) {
    hb.y_c.Resize(n * dE);
    ops_->Copy(hb.y.data(), n * dE, hb.y_c.data());
    RoundToCompute(hb.y_c.data(), n * dE);
    y_c = hb.y_c.data();
  }
  if (!deferred) {
    hb.lse.resize(n);
    hb.target_logit.assign(n, 0.0);
  }
  LocalTargets(shard, targets, n, &hb.local_target);
  hb.dy.Resize(dx != nullptr ? n * dE : 0);
  const Real coef = static_cast<Real>(grad_scale / double(n));
  kernels::HeadLossArgs<Real> args;
  args.y = y_c;
  args.e_bar = EBarCompute();
  args.rows = n;
  args.vocab = Vl;
  args.d_e = dE;
  args.scale = scale;
  // With PLNorm |z| ≤ e^{s_F} (unit y, unit rows of Ē), so below e^{s_F} = 39 that bound
  // is a safe softmax shift and the max pass is not needed.
  args.shift = d.pl_norm && scale < 39 ? 1.01 * double(scale) : std::nan("");
  args.target = hb.local_target.data();
  args.coef = coef;
  args.lse = deferred ? nullptr : hb.lse.data();  // deferred: the table keeps the loss
  args.target_logit = deferred ? nullptr : hb.target_logit.data();
  args.dy = dx != nullptr ? hb.dy.data() : nullptr;
  args.d_e_bar = d_e_bar_.data();
  args.precision = options_.precision;
  args.e_bar_packed = &e_bar_op_;
  if (tp_->size() > 1) {
    ShardedHeadLoss(*ops_, *tp_, args, options_.head_chunk_rows, &hb.sharded);
  } else {
    ops_->HeadLoss(args);
  }
  const double loss = deferred ? 0.0 : kernels::HeadMeanLoss(hb.lse.data(), hb.target_logit.data(), n);
  if (token_losses != nullptr) {
    for (int64_t r = 0; r < n; ++r) token_losses[r] = static_cast<Real>(hb.lse[r] - hb.target_logit[r]);
  }
  if (dx == nullptr) return loss;
  tp_->AllReduce(hb.dy.data(), n * dE, ReduceOp::kSum);
  // ∂L/∂s_F = Σ_r y_r · ∂L/∂y_r, since z = e^{s_F} y Ēᵀ.
  ops_->DotAddInto(hb.y.data(), hb.dy.data(), n * dE, grads + layout_.Find("head/s_F")->buffer_offset);
  if (d.pl_norm) {
    ops_->UnitRowsBackward(hb.y.data(), dE, hb.y_norm.data(), hb.dy.data(), dE, dx, dE, n, dE, false);
  } else {
    ops_->Copy(hb.dy.data(), n * dE, dx);
  }
  return loss;
}

template <typename Real>
bool HeadPanelsAllowed(const ModelDims& dims, int64_t tp, HeadPath path) {
  return dims.pl_norm && tp == 1 && kernels::cpu::HeadPanelsServe<Real>(path, dims.d_e);
}
template bool HeadPanelsAllowed<float>(const ModelDims&, int64_t, HeadPath);
template bool HeadPanelsAllowed<double>(const ModelDims&, int64_t, HeadPath);

template <typename Real>
void Multiscreen<Real>::LayersBackward(const Real* params, Real* dx, Real* grads) {
  (void)params;  // BeginStep packed the weights and read the scalars
  const ModelDims& d = dims();
  const int64_t nt = layout_.shard().tiles(), dE = d.d_e, dK = d.d_k, dV = d.d_v;
  const int64_t B = batch_, T = seq_, rows = B * T, C = ShapeOf(batch_, seq_).p_cols();
  const auto& entries = layout_.entries();
  d_u_.Resize(rows * nt * dV);
  d_w_cat_.Resize(dE * nt * C);
  // The step's first backward writes W_O, W_Q, W_K, W_V, W_G (ZeroGradientsBeforeStep).
  const bool overwrite = overwrite_layer_grads_;
  overwrite_layer_grads_ = false;
  for (int64_t li = layout_.shard().layers() - 1; li >= 0; --li) {
    LayerActivations& a = acts_[li];
    const LayerWeights& w = weights_[li];
    const int64_t layer = layout_.shard().layer_begin + li;
    auto slot = [&](LayerTensor t) { return entries[layout_.MultiscreenEntry(layer, t)].buffer_offset; };
    std::optional<PhaseTimer> timer(std::in_place, options_.profile, StepProfile::kOutputGemm);
    // Δ = U · W_O: dU = dΔ · W_Oᵀ, dW_O += Uᵀ dΔ (dΔ = dx, the residual passes it through).
    const Real* d_delta = dx;
    if (options_.precision == Precision::kFp16) {
      d_delta_.Resize(rows * dE);
      ops_->Copy(dx, rows * dE, d_delta_.data());
      RoundGradientToCompute(d_delta_.data(), rows * dE);
      d_delta = d_delta_.data();
    }
    ops_->PackAsGemm(options_.precision, d_delta, rows * dE, &d_delta_op_);
    ops_->GemmBothPacked(false, true, rows, nt * dV, dE, 1, d_delta_op_, dE, w.w_o_op, dE, 0, d_u_.data(), nt * dV);
    ops_->GemmBothPacked(true, false, nt * dV, dE, rows, 1, a.u_op, nt * dV, d_delta_op_, dE, overwrite ? 0 : 1,
                         grads + slot(kWO), dE);
    timer.emplace(options_.profile, StepProfile::kScreeningBackward);
    const auto tiles = TileScalarsOf(li, nullptr);
    // Scalars: w = e^{s_w} + 1, r = σ(s_r), scale = e^{s_O}; the table adds their
    // gradients into grads where it computes them (on a device: no wait).
    // dP as the projections' GEMMs read it: written so by the table's backward where it can
    // (ScreeningBackwardToOperand: a device's bf16 path), else fp32 in d_p_, rounded and packed.
    kernels::ScreeningShape shape = ShapeOf(B, T);
    shape.p_bf16 = a.p_bf16;
    const bool dp_packed = ops_->ScreeningBackwardToOperand(shape, options_.precision, a.P.data(), tiles.data(),
                                                            a.saved(), d_u_.data(), &d_p_, &d_p_op_, grads + slot(kSw),
                                                            grads + slot(kSr), grads + slot(kSO));
    // P = x · W_cat: dW_cat = xᵀ dP (unpacked per tile), dx += dP · W_catᵀ (tp-summed).
    timer.emplace(options_.profile, StepProfile::kProjections);
    if (!dp_packed) {
      RoundGradientToCompute(d_p_.data(), rows * nt * C);
      ops_->PackAsGemm(options_.precision, d_p_.data(), rows * nt * C, &d_p_op_);
    }
    ops_->GemmBothPacked(true, false, dE, nt * C, rows, 1, a.x_in_op, dE, d_p_op_, nt * C, 0, d_w_cat_.data(), nt * C);
    UnpackProjections(*ops_, layout_, d_w_cat_.data(), layout_.shard().layer_begin + li, grads, !overwrite);
    AddProductAcrossTp(*ops_, *tp_, false, true, rows, dE, nt * C, d_p_op_, nt * C, w.w_cat_op, nt * C, scratch_x_,
                       dx);
    this->LayerGradientsWritten(layout_.shard().layer_begin + li);
  }
}

template <typename Real>
void Multiscreen<Real>::EmbedBackward(const Real* params, const int32_t* ids, int64_t n, const Real* dx, Real* grads) {
  EmbedTableBackward(params, ids, n, dx);
  EmbedScaleBackward(params, ids, n, dx, grads);
}

template <typename Real>
void Multiscreen<Real>::EmbedTableBackward(const Real* params, const int32_t* ids, int64_t n, const Real* dx) {
  (void)params;  // s_E was read by BeginStep
  const ShardSpec& shard = layout_.shard();
  const Real scale = static_cast<Real>(std::exp(double(s_e_)));
  PhaseTimer timer(options_.profile, StepProfile::kEmbed);
  ops_->EmbeddingBackward(dx, ids, n, shard.vocab_begin, shard.vocab_end, dims().d_e, scale, d_e_bar_.data());
}

template <typename Real>
void Multiscreen<Real>::EmbedScaleBackward(const Real* params, const int32_t* ids, int64_t n, const Real* dx,
                                           Real* grads) {
  const int64_t dE = dims().d_e;
  const int64_t s_e = layout_.Find("embed/s_E")->buffer_offset;
  // ∂L/∂s_E = Σ dx · x⁰ with x⁰ = e^{s_E} Ē[ids]; dx and x⁰ are replicated over tp,
  // so the local rows alone would miss the other shards' ids: recompute x⁰ whole (a
  // device reads the ids Embed uploaded, KernelTable::EmbeddingForward's table copying
  // none when they are the same).
  step_x0_.Resize(n * dE);
  Embed(params, ids, n, step_x0_.data());
  PhaseTimer timer(options_.profile, StepProfile::kEmbed);
  ops_->DotAddInto(dx, step_x0_.data(), n * dE, grads + s_e);
}

template <typename Real>
bool Multiscreen<Real>::CanCaptureMicroStep() const {
  const ShardSpec& shard = layout_.shard();
  return ops_->CanCapture() && tp_->size() == 1 && shard.embed && shard.head;
}

template <typename Real>
void Multiscreen<Real>::PrepareMicroStep(int64_t B, int64_t T) {
  // The shape LayersForward(B, T) and its backward give the screening calls (rope_scaling_
  // as LayersForward sets it), so that their table lookups hit what is uploaded here.
  rope_scaling_ = MultiscreenShape(dims(), layout_.shard().tiles(), B, T, nullptr).rope_scaling;
  for (int64_t li = 0; li < layout_.shard().layers(); ++li) {
    const auto tiles = TileScalarsOf(li, nullptr);
    ops_->PrepareScreeningTables(ShapeOf(B, T), tiles.data());
  }
}

template <typename Real>
void Multiscreen<Real>::PreloadInputs(const int32_t* ids, const int32_t* targets, int64_t n) {
  LocalTargets(layout_.shard(), targets, n, &head_.local_target);
  ops_->PreloadInputs(ids, head_.local_target.data(), n);
}

template <typename Real>
void Multiscreen<Real>::EndStep(Real* grads) {
  PhaseTimer timer(options_.profile, StepProfile::kEmbed);
  const ShardSpec& shard = layout_.shard();
  if (!(shard.embed || shard.head)) return;
  const int64_t dE = dims().d_e;
  // The step's first EndStep writes W_E's gradient (ZeroGradientsBeforeStep), the rest add.
  const bool accumulate = !overwrite_w_e_;
  overwrite_w_e_ = false;
  ops_->UnitRowsBackward(e_bar_.data(), dE, e_norm_.data(), d_e_bar_.data(), dE,
                         grads + layout_.Find("embed/W_E")->buffer_offset, dE, shard.vocab(), dE, accumulate);
}




template <typename Real>
void Multiscreen<Real>::Logits(const Real* params, const int32_t* ids, int64_t T, const InferenceOptions& options,
                               Real* logits) {
  const ModelDims& d = dims();
  const int64_t dE = d.d_e, V = layout_.shard().vocab();
  BeginStep(params);
  this->step_x_.Resize(T * dE);
  Real* x = this->step_x_.data();
  Embed(params, ids, T, x);
  LayersForward(params, 1, T, x, &options);
  if (d.pl_norm) ops_->UnitRowsForward(x, dE, x, dE, static_cast<Real*>(nullptr), T, dE);
  const Real scale = static_cast<Real>(std::exp(double(s_f_)));
  // Into the caller's host memory directly on the CPU; through a device array elsewhere.
  const bool host = ops_->device() == Device::kCpu;
  if (!host) logits_.Resize(T * V);
  ops_->GemmPacked(false, true, T, V, dE, scale, x, dE, kAsGemm, e_bar_op_, dE, 0,
                   host ? logits : logits_.data(), V);
  if (!host) ops_->Download(logits_.data(), T * V, logits);
}

template class Multiscreen<float>;
template class Multiscreen<double>;

}  // namespace multiscreen
