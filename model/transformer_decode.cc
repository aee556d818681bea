#include "model/transformer_decode.h"

#include <cmath>
#include <string>

#include "kernels/cpu/rope.h"
#include "model/tile_weights.h"
#include "model/transformer.h"

namespace multiscreen {

namespace {

template <typename Real>
std::unique_ptr<kernels::TransformerKernels<Real>> TransformerKernelsFor(const ModelOptions& placement) {
  auto table = MakeTransformerKernels<Real>(placement.device, KernelOptionsOf(placement));
  if (!table.ok()) FatalModelError("--device=" + DeviceName(placement.device) + ": " + std::string(table.status().message()));
  return std::move(*table);
}

}  // namespace

template <typename Real>
TransformerDecodeSession<Real>::TransformerDecodeSession(const ModelDims& dims, const Real* params,
                                                         const InferenceOptions& options, const ModelOptions& placement)
    : Decoder<Real>(placement, dims.vocab),
      layout_(dims, ShardSpec::Full(dims)),
      precision_(placement.precision),
      tk_(TransformerKernelsFor<Real>(placement)),
      table_store_(placement.device),
      x_(placement.device), a_(placement.device), qkv_(placement.device), o_(placement.device), gu_(placement.device),
      hidden_(placement.device), rstd_(placement.device) {
  const Device device = placement.device;
  const int64_t V = dims.vocab, dE = dims.d_e, H = dims.n_heads, dh = dims.d_k, F = dims.d_ff();
  const kernels::cpu::RopeScaling yarn = YarnScalingOf(options);
  auto read = [&](const Real* src, int64_t n) {  // host values of parameters
    std::vector<Real> host(n);
    ops().Download(src, n, host.data());
    return host;
  };
  const Real* w_e = params + layout_.Find("embed/W_E")->buffer_offset;
  if (dims.sio) {  // Ē: unit rows of W_E
    table_store_.Resize(V * dE);
    ops().UnitRowsForward(w_e, dE, table_store_.data(), dE, nullptr, V, dE);
    if (precision_ != Precision::kFp32) ops().RoundTo(precision_, table_store_.data(), V * dE);
    table_ = table_store_.data();
    embed_scale_ = static_cast<Real>(std::exp(double(read(params + layout_.Find("embed/s_E")->buffer_offset, 1)[0])));
    head_scale_ = static_cast<Real>(std::exp(double(read(params + layout_.Find("head/s_F")->buffer_offset, 1)[0])));
  } else {
    table_ = GemmOperand(ops(), precision_, w_e, V * dE, &table_store_);
  }
  ops().PackOperand(precision_, table_, V * dE, &table_op_);
  auto at = [&](int64_t l, const char* name) { return params + layout_.Find(ParamLayout::LayerPrefix(l) + name)->buffer_offset; };
  const bool screening = dims.attention == AttentionKind::kScreening;
  layers_.reserve(dims.n_layers);
  for (int64_t l = 0; l < dims.n_layers; ++l) {
    Layer& L = layers_.emplace_back(device);
    L.attn_norm = at(l, "attn_norm");
    L.ffn_norm = at(l, "ffn_norm");
    // W_Q, W_K, W_V [N_H, d_E, d_h] → the columns of one [d_E, 3 d_E] matrix, as
    // Transformer::BeginStep packs them (QkvColumn: either head order).
    L.w_qkv.Resize(dE * 3 * dE);
    const char* parts[3] = {"W_Q", "W_K", "W_V"};
    kernels::Copy2DJob<Real> jobs[3];
    for (int p = 0; p < 3; ++p) {  // one launch
      const int64_t col = QkvColumn(dims, p, 0, H);
      jobs[p] = {at(l, parts[p]), dh, dE * dh, dE, dh, H, L.w_qkv.data() + col, 3 * dE, QkvColumn(dims, p, 1, H) - col};
    }
    ops().Copy2DJobs(jobs, 3, /*accumulate=*/false);
    if (precision_ != Precision::kFp32) ops().RoundTo(precision_, L.w_qkv.data(), dE * 3 * dE);
    ops().PackOperand(precision_, L.w_qkv.data(), dE * 3 * dE, &L.w_qkv_op);
    ops().PackOperand(precision_, at(l, "W_O"), dE * dE, &L.w_o);
    ops().PackOperand(precision_, at(l, "W_gate"), 2 * F * dE, &L.w_gu);  // W_up follows W_gate
    ops().PackOperand(precision_, at(l, "W_down"), F * dE, &L.w_down);
    if (screening) {  // the heads' units, as the model's (TransformerScreeningShape; scale 1: no s_O)
      const kernels::ScreeningShape shape = TransformerScreeningShape(dims, H, 0, 0);
      const std::vector<Real> s_w = read(at(l, "s_w"), H), s_r = read(at(l, "s_r"), H), s_o(H, Real(0));
      L.screens = ScreeningCacheFor<Real>(device, shape, MapTileScalars(s_w.data(), s_r.data(), s_o.data(), H, &options));
      continue;
    }
    kernels::AttentionCacheShape shape;
    shape.heads = H;
    shape.d_h = dh;
    shape.kind = dims.attention;
    shape.sigmoid_bias_length = SigmoidBiasLength(dims, &options, 0);
    shape.qk_norm = dims.qk_norm;
    shape.rope_scaling = yarn;
    shape.scale.assign(H, 1.0 / std::sqrt(double(dh)));
    if (dims.qk_norm) {
      const std::vector<Real> s_qk = read(at(l, "s_QK"), H);
      for (int64_t h = 0; h < H; ++h) shape.scale[h] = std::exp(double(s_qk[h]));
    }
    if (dims.attention == AttentionKind::kSsmax) {  // SSMax's s_SS folded in, as Transformer::BeginStep
      const std::vector<Real> s_ss = read(at(l, "s_SS"), H);
      for (int64_t h = 0; h < H; ++h) shape.scale[h] *= double(s_ss[h]);
    }
    for (double& c : shape.scale) c *= kernels::cpu::YarnLogitScale(yarn.factor);  // YaRN's temperature (1 without)
    L.attention = AttentionCacheFor<Real>(device, shape);
  }
  x_.Resize(dE);
  a_.Resize(dE);
  qkv_.Resize(3 * dE);
  o_.Resize(dE);
  gu_.Resize(2 * F);
  hidden_.Resize(F);
  rstd_.Resize(1);
  LogitsRows(1);  // the logits of a token, allocated with the session
}

template <typename Real>
void TransformerDecodeSession<Real>::FeedRows(const int32_t* tokens, int64_t rows) {
  const ModelDims& d = layout_.dims();
  const int64_t dE = d.d_e, F = d.d_ff(), V = d.vocab;
  constexpr auto kRounded = kernels::PackedGemmA::kRounded;  // nothing else rounds the rows
  for (auto* a : {&x_, &a_, &o_}) a->Resize(rows * dE);
  qkv_.Resize(rows * 3 * dE);
  gu_.Resize(rows * 2 * F);
  hidden_.Resize(rows * F);
  rstd_.Resize(rows);
  Real *x = x_.data(), *a = a_.data(), *qkv = qkv_.data(), *o = o_.data();
  ops().EmbeddingForward(table_, 0, V, dE, tokens, rows, embed_scale_, x);
  for (Layer& L : layers_) {
    // a = RMSNorm(x); [q | k | v] = a W_QKV; o = the layer's attention (or screening) of
    // each token in order over the cache, which grows by one token a row; x += o W_O.
    // GemmPacked rounds a, o, the hidden rows as it reads them.
    tk_->RmsNormForward(x, L.attn_norm, a, rstd_.data(), rows, dE);
    ops().GemmPacked(false, false, rows, 3 * dE, dE, 1, a, dE, kRounded, L.w_qkv_op, 3 * dE, 0, qkv, 3 * dE);
    if (L.screens != nullptr) {
      L.screens->StepRows(qkv, 3 * dE, rows, position_, o, dE);
    } else {
      L.attention->StepRows(qkv, 3 * dE, rows, position_, o, dE);
    }
    ops().GemmPacked(false, false, rows, dE, dE, 1, o, dE, kRounded, L.w_o, dE, 1, x, dE);
    // x += SwiGLU(RMSNorm(x) [W_gate; W_up]ᵀ) W_down.
    tk_->RmsNormForward(x, L.ffn_norm, a, rstd_.data(), rows, dE);
    ops().GemmPacked(false, true, rows, 2 * F, dE, 1, a, dE, kRounded, L.w_gu, dE, 0, gu_.data(), 2 * F);
    tk_->SwiGluForward(gu_.data(), hidden_.data(), rows, F);
    ops().GemmPacked(false, false, rows, dE, F, 1, hidden_.data(), F, kRounded, L.w_down, dE, 1, x, dE);
  }
  position_ += rows;
}

template <typename Real>
void TransformerDecodeSession<Real>::HeadRows(int64_t rows) {
  const ModelDims& d = layout_.dims();
  const int64_t dE = d.d_e, V = d.vocab;
  constexpr auto kRounded = kernels::PackedGemmA::kRounded;
  Real *x = x_.data(), *a = a_.data();
  // y = x/‖x‖ (pl_norm) or RMSNorm(x) without gain; logits = scale · y tableᵀ.
  if (d.pl_norm) {
    ops().UnitRowsForward(x, dE, a, dE, nullptr, rows, dE);
  } else {
    tk_->RmsNormForward(x, nullptr, a, rstd_.data(), rows, dE);
  }
  ops().GemmPacked(false, true, rows, V, dE, head_scale_, a, dE, kRounded, table_op_, dE, 0, LogitsRows(rows), V);
}

template class TransformerDecodeSession<float>;
template class TransformerDecodeSession<double>;

}  // namespace multiscreen
