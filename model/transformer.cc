#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "model/residual.h"

namespace multiscreen {
namespace {
template <typename Real>
std::unique_ptr<kernels::TransformerKernels<Real>> TransformerTableFor(const ModelOptions& options) {
  // Under bf16 the CUDA table runs the tiled attention (kernels/cuda/attention_tiled.h).
  auto table = MakeTransformerKernels<Real>(options.device, KernelOptionsOf(options));
  if (!table.ok()) FatalModelError(std::string(table.status().message()));
  return std::move(*table);
}

}  // namespace

template <typename Real>
Transformer<Real>::Transformer(const ModelDims& dims, const ShardSpec& shard, ModelOptions options, Communicator* tp)
    : ModelStage<Real>(options.device),
      layout_(dims, shard),
      options_(options),
      tp_(tp != nullptr ? tp : &single_),
      sharded_(options.device),
      ops_(KernelTableFor<Real>(options)),
      tk_(TransformerTableFor<Real>(options)),
      table_(options.device), e_norm_(options.device), table_c_(options.device), d_table_(options.device),
      d_a_(options.device), d_qkv_(options.device), d_q_(options.device), d_k_(options.device), d_v_(options.device),
      d_o_(options.device), d_gu_(options.device), d_h_(options.device), d_w_qkv_(options.device),
      scratch_x_(options.device), d_delta_(options.device), y_(options.device), y_c_(options.device),
      y_stat_(options.device), dy_(options.device), step_x0_(options.device) {
  if (!dims.transformer()) FatalModelError("model " + dims.name + " is not a Transformer");
  const int64_t n_tp = tp_->size();
  if (dims.n_heads % n_tp != 0) {
    FatalModelError("model " + dims.name + ": tp = " + std::to_string(n_tp) + " does not divide N_H = " +
                    std::to_string(dims.n_heads));
  }
  if (shard.tiles() * n_tp != dims.n_heads || shard.tile_begin != tp_->rank() * shard.tiles() ||
      (shard.vocab() != dims.vocab && n_tp == 1)) {
    FatalModelError("model " + dims.name + ": the shard's heads [" + std::to_string(shard.tile_begin) + ", " +
                    std::to_string(shard.tile_end) + ") are not tp rank " + std::to_string(tp_->rank()) + "'s of " +
                    std::to_string(n_tp));
  }
  for (int64_t li = 0; li < shard.layers(); ++li) {
    weights_.emplace_back(options.device);
    acts_.emplace_back(options.device);
  }
}

template <typename Real>
typename Transformer<Real>::Slots Transformer<Real>::SlotsOf(int64_t layer) const {
  const auto& e = layout_.entries();
  int64_t i = layout_.LayerEntry(layer);
  Slots s;
  s.attn_norm = e[i++].buffer_offset;
  s.w_q = e[i++].buffer_offset;
  s.w_k = e[i++].buffer_offset;
  s.w_v = e[i++].buffer_offset;
  s.w_o = e[i++].buffer_offset;
  s.s_qk = dims().qk_norm ? e[i++].buffer_offset : -1;
  s.s_ss = dims().attention == AttentionKind::kSsmax ? e[i++].buffer_offset : -1;
  s.s_w = screening() ? e[i++].buffer_offset : -1;
  s.s_r = screening() ? e[i++].buffer_offset : -1;
  s.ffn_norm = e[i++].buffer_offset;
  s.w_gate = e[i++].buffer_offset;
  s.w_up = e[i++].buffer_offset;
  s.w_down = e[i++].buffer_offset;
  return s;
}

template <typename Real>
kernels::ScreeningShape Transformer<Real>::ScreeningShapeOf(int64_t B, int64_t T) const {
  return TransformerScreeningShape(dims(), layout_.shard().tiles(), B, T);
}

template <typename Real>
kernels::ScreeningSaved<Real> Transformer<Real>::LayerActivations::saved() {
  return {q.data(), k.data(), v.data(), q_norm.data(), k_norm.data(), v_norm.data(), screen_h.data()};
}

template <typename Real>
int64_t Transformer<Real>::LocalFfn() const {
  const ShardSpec& s = layout_.shard();  // as ParamLayout splits W_gate, W_up, W_down
  return dims().d_ff() * s.tile_end / dims().n_heads - dims().d_ff() * s.tile_begin / dims().n_heads;
}

template <typename Real>
const Real* Transformer<Real>::Table() const {
  return options_.precision == Precision::kFp32 ? table_.data() : table_c_.data();
}

template <typename Real>
void Transformer<Real>::RoundToCompute(Real* data, int64_t n) const {
  ops_->RoundTo(options_.precision, data, n);
}

template <typename Real>
void Transformer<Real>::RoundGradientToCompute(Real* data, int64_t n) const {
  if (options_.precision == Precision::kFp16) ops_->RoundTo(options_.precision, data, n);
}

template <typename Real>
const Real* Transformer<Real>::GradientOperand(const Real* grad, int64_t n) {
  if (options_.precision != Precision::kFp16) return grad;
  d_delta_.Resize(n);
  ops_->Copy(grad, n, d_delta_.data());
  ops_->RoundTo(Precision::kFp16, d_delta_.data(), n);
  return d_delta_.data();
}

template <typename Real>
void Transformer<Real>::BeginStep(const Real* params) {
  PhaseTimer timer(options_.profile, StepProfile::kEmbed);
  const ModelDims& d = dims();
  const ShardSpec& shard = layout_.shard();
  const int64_t dE = d.d_e, H = shard.tiles(), dh = d.d_k, dl = H * dh, F = LocalFfn();
  ops_->BeginScreeningStep();  // screening heads' tile tables of earlier steps may be recycled (kernel_table.h)
  if (shard.embed || shard.head) {
    const Real* w_e = params + layout_.Find("embed/W_E")->buffer_offset;
    const int64_t rows = shard.vocab();
    table_.Resize(rows * dE);
    d_table_.Resize(rows * dE);
    ops_->Fill(d_table_.data(), rows * dE, Real(0));
    if (d.sio) {  // Ē: unit rows of W_E
      e_norm_.Resize(rows);
      ops_->UnitRowsForward(w_e, dE, table_.data(), dE, e_norm_.data(), rows, dE);
    } else {
      ops_->Copy(w_e, rows * dE, table_.data());
    }
    if (options_.precision != Precision::kFp32) {
      table_c_.Resize(rows * dE);
      ops_->Copy(table_.data(), rows * dE, table_c_.data());
      RoundToCompute(table_c_.data(), rows * dE);
    }
    if (shard.head && tp_->size() == 1) ops_->PrepareHead(Table(), rows, dE);
    if (shard.head) ops_->PackOperand(options_.precision, Table(), rows * dE, &table_op_);
  }
  for (int64_t li = 0; li < shard.layers(); ++li) {
    LayerWeights& w = weights_[li];
    const Slots s = SlotsOf(shard.layer_begin + li);
    // The local heads of W_Q, W_K, W_V [H_l, d_E, d_h] → the columns of one [d_E, 3 d_l] matrix.
    w.w_qkv.Resize(dE * 3 * dl);
    const int64_t parts[3] = {s.w_q, s.w_k, s.w_v};
    kernels::Copy2DJob<Real> jobs[3];
    for (int p = 0; p < 3; ++p) {  // head h's [d_E, d_h] block → the columns from QkvColumn(p, h): one launch
      jobs[p] = {params + parts[p], dh, dE * dh, dE, dh, H, w.w_qkv.data() + QkvColumn(p, 0), 3 * dl,
                 QkvColumn(p, 1) - QkvColumn(p, 0)};
    }
    ops_->Copy2DJobs(jobs, 3, /*accumulate=*/false);
    w.w_o.Resize(dl * dE);
    ops_->Copy(params + s.w_o, dl * dE, w.w_o.data());
    w.w_gu.Resize(2 * F * dE);
    ops_->Copy(params + s.w_gate, F * dE, w.w_gu.data());
    ops_->Copy(params + s.w_up, F * dE, w.w_gu.data() + F * dE);
    w.w_down.Resize(F * dE);
    ops_->Copy(params + s.w_down, F * dE, w.w_down.data());
    const std::pair<Array*, kernels::PackedOperand<Real>*> packs[] = {
        {&w.w_qkv, &w.w_qkv_op}, {&w.w_o, &w.w_o_op}, {&w.w_gu, &w.w_gu_op}, {&w.w_down, &w.w_down_op}};
    for (auto [a, op] : packs) ops_->PackRounded(options_.precision, a->data(), a->size(), op);
  }
  ReadScalars(params);
}

template <typename Real>
void Transformer<Real>::ReadScalars(const Real* params) {
  const ModelDims& d = dims();
  const ShardSpec& shard = layout_.shard();
  const int64_t H = shard.tiles(), dh = d.d_k;
  // Where each host scalar lives: the ranges of params one DownloadRanges reads, in order.
  std::vector<int64_t> begin, length;
  auto read = [&](int64_t offset, int64_t n) {
    begin.push_back(offset);
    length.push_back(n);
  };
  if (d.sio && shard.embed) read(layout_.Find("embed/s_E")->buffer_offset, 1);
  if (d.sio && shard.head) read(layout_.Find("head/s_F")->buffer_offset, 1);
  for (int64_t li = 0; li < shard.layers(); ++li) {
    const Slots s = SlotsOf(shard.layer_begin + li);
    if (d.qk_norm) read(s.s_qk, H);
    if (d.attention == AttentionKind::kSsmax) read(s.s_ss, H);
    if (screening()) {
      read(s.s_w, H);
      read(s.s_r, H);
    }
  }
  int64_t total = 0;
  for (int64_t n : length) total += n;
  std::vector<Real> scalars(total);
  ops_->DownloadRanges(params, begin.data(), length.data(), static_cast<int64_t>(begin.size()), scalars.data());
  const Real* next = scalars.data();
  if (d.sio && shard.embed) s_e_ = *next++;
  if (d.sio && shard.head) s_f_ = *next++;
  for (int64_t li = 0; li < shard.layers(); ++li) {
    LayerWeights& w = weights_[li];
    w.base.assign(H, 1.0 / std::sqrt(double(dh)));
    if (d.qk_norm) {
      for (int64_t h = 0; h < H; ++h) w.base[h] = std::exp(double(next[h]));
      next += H;
    }
    w.scale = w.base;
    if (d.attention == AttentionKind::kSsmax) {  // SSMax: scale_h = base_h · s_SS,h
      for (int64_t h = 0; h < H; ++h) w.scale[h] *= double(next[h]);
      next += H;
    }
    if (screening()) {
      w.s_w.assign(next, next + H);
      w.s_r.assign(next + H, next + 2 * H);
      w.s_o.assign(H, Real(0));
      next += 2 * H;
    }
  }
}

template <typename Real>
void Transformer<Real>::Embed(const Real* params, const int32_t* ids, int64_t n, Real* x) {
  (void)params;  // BeginStep made the table and read s_E
  PhaseTimer timer(options_.profile, StepProfile::kEmbed);
  const ShardSpec& shard = layout_.shard();
  const Real scale = dims().sio ? static_cast<Real>(std::exp(double(s_e_))) : Real(1);
  ops_->EmbeddingForward(Table(), shard.vocab_begin, shard.vocab_end, dims().d_e, ids, n, scale, x);
  tp_->AllReduce(x, n * dims().d_e, ReduceOp::kSum);  // each rank holds its vocabulary rows' embeddings
}

template <typename Real>
void Transformer<Real>::LayersForward(const Real* params, int64_t B, int64_t T, Real* x,
                                      const InferenceOptions* inference) {
  const ModelDims& d = dims();
  // YaRN at inference (kernels/cpu/rope.h): NTK-by-parts frequencies, and the logits times
  // (0.1 ln F + 1)², folded into each head's scale.
  rope_ = {};
  if (inference != nullptr) rope_ = YarnScalingOf(*inference);
  const double logit_scale = kernels::cpu::YarnLogitScale(rope_.factor);
  const int64_t dE = d.d_e, H = layout_.shard().tiles(), dh = d.d_k, dl = H * dh, F = LocalFfn(), rows = B * T;
  batch_ = B;
  seq_ = T;
  sigmoid_bias_length_ = SigmoidBiasLength(d, inference, T);
  const kernels::AttentionShape shape{B, T, H, dh, d.attention, sigmoid_bias_length_};
  for (int64_t li = 0; li < layout_.shard().layers(); ++li) {
    LayerActivations& a = acts_[li];
    const LayerWeights& w = weights_[li];
    const Slots s = SlotsOf(layout_.shard().layer_begin + li);
    // Attention block: a = RMSNorm(x), q k v = a W, [unit q, k], attention with RoPE (or
    // screening), x += o W_O.
    std::optional<PhaseTimer> timer(std::in_place, options_.profile, StepProfile::kProjections);
    a.x_in.Resize(rows * dE);
    ops_->Copy(x, rows * dE, a.x_in.data());
    a.rstd1.Resize(rows);
    a.xn1.Resize(rows * dE);
    tk_->RmsNormForward(a.x_in.data(), params + s.attn_norm, a.xn1.data(), a.rstd1.data(), rows, dE);
    ops_->PackRounded(options_.precision, a.xn1.data(), rows * dE, &a.xn1_op);
    a.qkv.Resize(rows * 3 * dl);
    ops_->GemmBothPacked(false, false, rows, 3 * dl, dE, 1, a.xn1_op, dE, w.w_qkv_op, 3 * dl, 0, a.qkv.data(), 3 * dl);
    Array* qkv[3] = {&a.q, &a.k, &a.v};
    for (Array* part : qkv) part->Resize(rows * dl);
    timer.emplace(options_.profile, StepProfile::kAttention);
    a.o.Resize(rows * dl);
    if (screening()) {  // the projection is the screening kernels' P; o = their U
      for (Array* norm : {&a.q_norm, &a.k_norm, &a.v_norm}) norm->Resize(rows * H);
      a.screen_h.Resize(rows * dl);
      const auto tiles = MapTileScalars(w.s_w.data(), w.s_r.data(), w.s_o.data(), H, inference);
      ops_->ScreeningForward(ScreeningShapeOf(B, T), a.qkv.data(), tiles.data(), a.saved(), a.o.data());
    } else {  // q k v = the projection's three parts, [unit q, k], the mechanism with RoPE
      kernels::Copy2DJob<Real> split[3];
      for (int p = 0; p < 3; ++p) split[p] = {a.qkv.data() + p * dl, 3 * dl, 0, rows, dl, 1, qkv[p]->data(), dl, 0};
      ops_->Copy2DJobs(split, 3, /*accumulate=*/false);
      if (d.qk_norm) {  // before RoPE, which the attention op applies: RoPE(unit(q)) = unit(RoPE(q))
        a.q_norm.Resize(rows * H);
        a.k_norm.Resize(rows * H);
        ops_->UnitRowsForward(a.q.data(), dh, a.q.data(), dh, a.q_norm.data(), rows * H, dh);
        ops_->UnitRowsForward(a.k.data(), dh, a.k.data(), dh, a.k_norm.data(), rows * H, dh);
      }
      a.lse.resize(B * H * T);
      std::vector<double> scale = w.scale;
      for (double& c : scale) c *= logit_scale;
      // RoPE inside the op: fused into the tiled CUDA kernel's loads, else turned copies.
      tk_->AttentionForward(shape, a.q.data(), a.k.data(), a.v.data(), scale.data(), a.o.data(), a.lse.data(),
                            &rope_);
    }
    ops_->PackRounded(options_.precision, a.o.data(), rows * dl, &a.o_op);
    // x += o W_O: this rank's heads' part, summed over the tp group.
    timer.emplace(options_.profile, StepProfile::kOutputGemm);
    AddProductAcrossTp(*ops_, *tp_, false, false, rows, dE, dl, a.o_op, dl, w.w_o_op, dE, scratch_x_, x);
    // FFN block: f = RMSNorm(x), x += (SiLU(f W_gateᵀ) ⊙ f W_upᵀ) W_down.
    timer.emplace(options_.profile, StepProfile::kFfn);
    a.x_mid.Resize(rows * dE);
    ops_->Copy(x, rows * dE, a.x_mid.data());
    a.rstd2.Resize(rows);
    a.xn2.Resize(rows * dE);
    tk_->RmsNormForward(a.x_mid.data(), params + s.ffn_norm, a.xn2.data(), a.rstd2.data(), rows, dE);
    ops_->PackRounded(options_.precision, a.xn2.data(), rows * dE, &a.xn2_op);
    a.gu.Resize(rows * 2 * F);
    ops_->GemmBothPacked(false, true, rows, 2 * F, dE, 1, a.xn2_op, dE, w.w_gu_op, dE, 0, a.gu.data(), 2 * F);
    a.h.Resize(rows * F);
    tk_->SwiGluForward(a.gu.data(), a.h.data(), rows, F);
    ops_->PackRounded(options_.precision, a.h.data(), rows * F, &a.h_op);
    // This rank's hidden units' part, summed over the tp group.
    AddProductAcrossTp(*ops_, *tp_, false, false, rows, dE, F, a.h_op, F, w.w_down_op, dE, scratch_x_, x);
  }
}

template <typename Real>
double Transformer<Real>::HeadLoss(const Real* params, const Real* x, const int32_t* targets, int64_t n, Real* dx,
                                   Real* grads, double grad_scale, Real* token_losses) {
  (void)params;
  PhaseTimer timer(options_.profile, StepProfile::kHead);
  const ModelDims& d = dims();
  const ShardSpec& shard = layout_.shard();
  const int64_t dE = d.d_e;
  // y = x/‖x‖ (pl_norm) or RMSNorm(x) without gain; y_stat_ holds ‖x‖ or 1/rms.
  y_.Resize(n * dE);
  y_stat_.Resize(n);
  if (d.pl_norm) {
    ops_->UnitRowsForward(x, dE, y_.data(), dE, y_stat_.data(), n, dE);
  } else {
    tk_->RmsNormForward(x, nullptr, y_.data(), y_stat_.data(), n, dE);
  }
  const Real* y_c = y_.data();
  if (options_.precision != Precision::kFp32) {
    y_c_.Resize(n * dE);
    ops_->Copy(y_.data(), n * dE, y_c_.data());
    RoundToCompute(y_c_.data(), n * dE);
    y_c = y_c_.data();
  }
  lse_.resize(n);
  target_logit_.assign(n, 0.0);
  local_target_.resize(n);
  for (int64_t r = 0; r < n; ++r) {
    local_target_[r] =
        targets[r] >= shard.vocab_begin && targets[r] < shard.vocab_end ? targets[r] - shard.vocab_begin : -1;
  }
  dy_.Resize(dx != nullptr ? n * dE : 0);
  const Real scale = d.sio ? static_cast<Real>(std::exp(double(s_f_))) : Real(1);
  const Real coef = static_cast<Real>(grad_scale / double(n));
  kernels::HeadLossArgs<Real> args;
  args.y = y_c;
  args.e_bar = Table();
  args.rows = n;
  args.vocab = shard.vocab();
  args.d_e = dE;
  args.scale = scale;
  args.shift = std::numeric_limits<double>::quiet_NaN();  // no bound known: each row's max
  args.target = local_target_.data();
  args.coef = coef;
  args.lse = lse_.data();
  args.target_logit = target_logit_.data();
  args.dy = dx != nullptr ? dy_.data() : nullptr;
  args.d_e_bar = d_table_.data();
  args.precision = options_.precision;
  args.e_bar_packed = &table_op_;
  if (tp_->size() > 1) {
    ShardedHeadLoss(*ops_, *tp_, args, options_.head_chunk_rows, &sharded_);
  } else {
    ops_->HeadLoss(args);
  }
  double loss = 0;
  for (int64_t r = 0; r < n; ++r) {
    const double l = lse_[r] - target_logit_[r];
    loss += l;
    if (token_losses != nullptr) token_losses[r] = static_cast<Real>(l);
  }
  loss /= double(n);
  if (dx == nullptr) return loss;
  tp_->AllReduce(dy_.data(), n * dE, ReduceOp::kSum);  // each rank's vocabulary rows' part
  if (d.sio) {  // ∂L/∂s_F = Σ y · ∂L/∂y, since z = e^{s_F} y Ēᵀ
    ops_->DotAddInto(y_.data(), dy_.data(), n * dE, grads + layout_.Find("head/s_F")->buffer_offset);
  }
  if (d.pl_norm) {
    ops_->UnitRowsBackward(y_.data(), dE, y_stat_.data(), dy_.data(), dE, dx, dE, n, dE, false);
  } else {
    tk_->RmsNormBackward(x, nullptr, y_stat_.data(), dy_.data(), dx, nullptr, n, dE, false);
  }
  return loss;
}

template <typename Real>
void Transformer<Real>::LayersBackward(const Real* params, Real* dx, Real* grads) {
  const ModelDims& d = dims();
  const int64_t dE = d.d_e, H = layout_.shard().tiles(), dh = d.d_k, dl = H * dh, F = LocalFfn();
  const int64_t B = batch_, T = seq_, rows = B * T;
  const Precision prec = options_.precision;
  const kernels::AttentionShape shape{B, T, H, dh, d.attention, sigmoid_bias_length_};
  d_h_.Resize(rows * F);
  d_gu_.Resize(rows * 2 * F);
  d_a_.Resize(rows * dE);
  d_o_.Resize(rows * dl);
  d_q_.Resize(rows * dl);
  d_k_.Resize(rows * dl);
  d_v_.Resize(rows * dl);
  d_qkv_.Resize(rows * 3 * dl);
  d_w_qkv_.Resize(dE * 3 * dl);
  std::vector<double> d_scale(H);
  std::vector<Real> g_scale(H);
  for (int64_t li = layout_.shard().layers() - 1; li >= 0; --li) {
    LayerActivations& a = acts_[li];
    const LayerWeights& w = weights_[li];
    const Slots s = SlotsOf(layout_.shard().layer_begin + li);
    std::optional<PhaseTimer> timer(std::in_place, options_.profile, StepProfile::kFfn);
    // FFN: x_out = x_mid + h W_down, h = SwiGLU(xn2 [W_gate; W_up]ᵀ), xn2 = RMSNorm(x_mid).
    ops_->PackAsGemm(prec, GradientOperand(dx, rows * dE), rows * dE, &d_out_op_);
    ops_->GemmBothPacked(false, true, rows, F, dE, 1, d_out_op_, dE, w.w_down_op, dE, 0, d_h_.data(), F);
    ops_->GemmBothPacked(true, false, F, dE, rows, 1, a.h_op, F, d_out_op_, dE, 1, grads + s.w_down, dE);
    tk_->SwiGluBackward(a.gu.data(), d_h_.data(), d_gu_.data(), rows, F);
    RoundGradientToCompute(d_gu_.data(), rows * 2 * F);
    ops_->PackAsGemm(prec, d_gu_.data(), rows * 2 * F, &d_gu_op_);
    // W_gate and W_up are adjacent in the layout: one [2 d_ff, d_E] gradient.
    ops_->GemmBothPacked(true, false, 2 * F, dE, rows, 1, d_gu_op_, 2 * F, a.xn2_op, dE, 1, grads + s.w_gate, dE);
    ops_->GemmBothPacked(false, false, rows, dE, 2 * F, 1, d_gu_op_, 2 * F, w.w_gu_op, dE, 0, d_a_.data(), dE);
    tp_->AllReduce(d_a_.data(), rows * dE, ReduceOp::kSum);  // ∂L/∂xn2 over every rank's hidden units
    tk_->RmsNormBackward(a.x_mid.data(), params + s.ffn_norm, a.rstd2.data(), d_a_.data(), dx, grads + s.ffn_norm,
                         rows, dE, true);
    // Attention: x_mid = x_in + o W_O.
    timer.emplace(options_.profile, StepProfile::kOutputGemm);
    ops_->PackAsGemm(prec, GradientOperand(dx, rows * dE), rows * dE, &d_out_op_);
    ops_->GemmBothPacked(false, true, rows, dl, dE, 1, d_out_op_, dE, w.w_o_op, dE, 0, d_o_.data(), dl);
    ops_->GemmBothPacked(true, false, dl, dE, rows, 1, a.o_op, dl, d_out_op_, dE, 1, grads + s.w_o, dE);
    timer.emplace(options_.profile, StepProfile::kAttention);
    if (screening()) {  // ∂P straight into ∂qkv (the same per-head layout); ∂s_w, ∂s_r added by the table
      const auto tiles = MapTileScalars(w.s_w.data(), w.s_r.data(), w.s_o.data(), H, nullptr);
      ops_->ScreeningBackwardAddParamGrads(ScreeningShapeOf(B, T), a.qkv.data(), tiles.data(), a.saved(), d_o_.data(),
                                           d_qkv_.data(), grads + s.s_w, grads + s.s_r, static_cast<Real*>(nullptr));
    } else {
      // d_q_, d_k_: the gradients of the unturned (unit) q, k (RoPE's transpose inside the op).
      tk_->AttentionBackward(shape, a.q.data(), a.k.data(), a.v.data(), a.o.data(), a.lse.data(), d_o_.data(),
                             w.scale.data(), d_q_.data(), d_k_.data(), d_v_.data(), d_scale.data(), &rope_);
      if (d.attention == AttentionKind::kSsmax) {
        // scale_h = base_h · s_SS,h: ∂L/∂s_SS = base · ∂L/∂scale.
        for (int64_t h = 0; h < H; ++h) g_scale[h] = static_cast<Real>(d_scale[h] * w.base[h]);
        ops_->AddHost(g_scale.data(), H, grads + s.s_ss);
      }
      if (d.qk_norm) {
        // scale_h = e^{s_QK,h} (· s_SS,h): ∂L/∂s_QK = scale · ∂L/∂scale.
        for (int64_t h = 0; h < H; ++h) g_scale[h] = static_cast<Real>(d_scale[h] * w.scale[h]);
        ops_->AddHost(g_scale.data(), H, grads + s.s_qk);
        ops_->UnitRowsBackward(a.q.data(), dh, a.q_norm.data(), d_q_.data(), dh, d_q_.data(), dh, rows * H, dh,
                               false);
        ops_->UnitRowsBackward(a.k.data(), dh, a.k_norm.data(), d_k_.data(), dh, d_k_.data(), dh, rows * H, dh,
                               false);
      }
      Array* dqkv[3] = {&d_q_, &d_k_, &d_v_};
      kernels::Copy2DJob<Real> join[3];
      for (int p = 0; p < 3; ++p) join[p] = {dqkv[p]->data(), dl, 0, rows, dl, 1, d_qkv_.data() + p * dl, 3 * dl, 0};
      ops_->Copy2DJobs(join, 3, /*accumulate=*/false);
    }
    RoundGradientToCompute(d_qkv_.data(), rows * 3 * dl);
    ops_->PackAsGemm(prec, d_qkv_.data(), rows * 3 * dl, &d_qkv_op_);
    timer.emplace(options_.profile, StepProfile::kProjections);
    // qkv = xn1 W_qkv: ∂W_qkv = xn1ᵀ ∂qkv (back into the heads of W_Q, W_K, W_V), ∂xn1 = ∂qkv W_qkvᵀ.
    ops_->GemmBothPacked(true, false, dE, 3 * dl, rows, 1, a.xn1_op, dE, d_qkv_op_, 3 * dl, 0, d_w_qkv_.data(), 3 * dl);
    const int64_t parts[3] = {s.w_q, s.w_k, s.w_v};
    kernels::Copy2DJob<Real> jobs[3];
    for (int p = 0; p < 3; ++p) {  // one launch
      jobs[p] = {d_w_qkv_.data() + QkvColumn(p, 0), 3 * dl, QkvColumn(p, 1) - QkvColumn(p, 0), dE, dh, H,
                 grads + parts[p], dh, dE * dh};
    }
    ops_->Copy2DJobs(jobs, 3, /*accumulate=*/true);
    ops_->GemmBothPacked(false, true, rows, dE, 3 * dl, 1, d_qkv_op_, 3 * dl, w.w_qkv_op, 3 * dl, 0, d_a_.data(), dE);
    tp_->AllReduce(d_a_.data(), rows * dE, ReduceOp::kSum);  // ∂L/∂xn1 over every rank's heads
    tk_->RmsNormBackward(a.x_in.data(), params + s.attn_norm, a.rstd1.data(), d_a_.data(), dx, grads + s.attn_norm,
                         rows, dE, true);
    this->LayerGradientsWritten(layout_.shard().layer_begin + li);
  }
}

template <typename Real>
void Transformer<Real>::EmbedBackward(const Real* params, const int32_t* ids, int64_t n, const Real* dx, Real* grads) {
  PhaseTimer timer(options_.profile, StepProfile::kEmbed);
  const ShardSpec& shard = layout_.shard();
  const int64_t dE = dims().d_e;
  const Real scale = dims().sio ? static_cast<Real>(std::exp(double(s_e_))) : Real(1);
  ops_->EmbeddingBackward(dx, ids, n, shard.vocab_begin, shard.vocab_end, dE, scale, d_table_.data());
  if (!dims().sio) return;
  // ∂L/∂s_E = Σ dx · x⁰ with x⁰ = e^{s_E} Ē[ids].
  step_x0_.Resize(n * dE);
  Embed(params, ids, n, step_x0_.data());
  ops_->DotAddInto(dx, step_x0_.data(), n * dE, grads + layout_.Find("embed/s_E")->buffer_offset);
}

template <typename Real>
void Transformer<Real>::ZeroGradientsBeforeStep(Real* grads) {
  ops_->Fill(grads, layout_.size(), Real(0));
}

template <typename Real>
void Transformer<Real>::EndStep(Real* grads) {
  PhaseTimer timer(options_.profile, StepProfile::kEmbed);
  const ShardSpec& shard = layout_.shard();
  if (!(shard.embed || shard.head)) return;
  const int64_t dE = dims().d_e, rows = shard.vocab();
  Real* g_w_e = grads + layout_.Find("embed/W_E")->buffer_offset;
  if (dims().sio) {
    ops_->UnitRowsBackward(table_.data(), dE, e_norm_.data(), d_table_.data(), dE, g_w_e, dE, rows, dE, true);
  } else {
    ops_->AddInto(d_table_.data(), rows * dE, g_w_e);
  }
}




template class Transformer<float>;
template class Transformer<double>;

}  // namespace multiscreen
