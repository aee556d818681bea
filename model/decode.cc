#include "model/decode.h"

#include <cmath>

namespace multiscreen {

template <typename Real>
DecodeSession<Real>::DecodeSession(const ModelDims& dims, const Real* params, const InferenceOptions& options,
                                   const ModelOptions& placement)
    : layout_(dims, ShardSpec::Full(dims)),
      precision_(placement.precision),
      ops_(KernelTableFor<Real>(placement)),
      e_bar_(placement.device),
      x_(placement.device), p_(placement.device), u_(placement.device),
      logits_(placement.device) {
  const int64_t V = dims.vocab, dE = dims.d_e, nt = dims.n_heads;
  Real s[3];  // s_E, s_F; then a layer's s_w, s_r, s_O (adjacent in the layout)
  ops_->Download(params + layout_.Find("embed/s_E")->buffer_offset, 1, &s[0]);
  ops_->Download(params + layout_.Find("head/s_F")->buffer_offset, 1, &s[1]);
  embed_scale_ = static_cast<Real>(std::exp(double(s[0])));
  head_scale_ = static_cast<Real>(std::exp(double(s[1])));
  e_bar_.Resize(V * dE);
  ops_->UnitRowsForward(params + layout_.Find("embed/W_E")->buffer_offset, dE, e_bar_.data(), dE, nullptr, V, dE);
  if (precision_ != Precision::kFp32) ops_->RoundTo(precision_, e_bar_.data(), V * dE);
  ops_->PackOperand(precision_, e_bar_.data(), V * dE, &e_bar_op_);
  // The layers' screening shape, as the model's forward at inference has it.
  const kernels::ScreeningShape shape = MultiscreenShape(dims, nt, 0, 0, &options);
  const auto& entries = layout_.entries();
  std::vector<Real> scalars(3 * nt);
  w_cat_op_.resize(dims.n_layers);
  w_o_op_.resize(dims.n_layers);
  for (int64_t l = 0; l < dims.n_layers; ++l) {
    w_cat_.emplace_back(placement.device);
    PackProjections(*ops_, layout_, params, l, &w_cat_[l]);
    if (precision_ != Precision::kFp32) ops_->RoundTo(precision_, w_cat_[l].data(), w_cat_[l].size());
    ops_->PackOperand(precision_, w_cat_[l].data(), w_cat_[l].size(), &w_cat_op_[l]);
    const ParamEntry& w_o = entries[layout_.MultiscreenEntry(l, kWO)];
    ops_->PackOperand(precision_, params + w_o.buffer_offset, w_o.size(), &w_o_op_[l]);
    ops_->Download(params + entries[layout_.MultiscreenEntry(l, kSw)].buffer_offset, 3 * nt, scalars.data());
    const auto tiles = MapTileScalars(scalars.data(), scalars.data() + nt, scalars.data() + 2 * nt, nt, &options);
    caches_.push_back(ScreeningCacheFor<Real>(placement.device, shape, tiles));
  }
  x_.Resize(dE);
  p_.Resize(nt * shape.p_cols());
  u_.Resize(nt * dims.d_v);
  logits_.Resize(V);
}

template <typename Real>
int64_t DecodeSession<Real>::CachedKeys(int64_t layer, int64_t tile) const {
  return caches_[layer]->CachedKeys(tile, position_);
}

template <typename Real>
void DecodeSession<Real>::Feed(int32_t token) {
  const ModelDims& d = layout_.dims();
  const int64_t dE = d.d_e, NH = d.n_heads, dV = d.d_v, C = 2 * d.d_k + (d.output_gate ? 2 : 1) * dV, V = d.vocab;
  Real* x = x_.data();
  constexpr auto kRounded = kernels::PackedGemmA::kRounded;  // nothing else rounds a token's rows
  ops_->EmbeddingForward(e_bar_.data(), 0, V, dE, &token, 1, embed_scale_, x);
  for (int64_t l = 0; l < d.n_layers; ++l) {
    // P = x · W_cat (spec step 3); U = the tiles' screening of this token (steps 5–13);
    // x += U · W_O (step 13, 2). GemmPacked rounds x and U as it reads them.
    ops_->GemmPacked(false, false, 1, NH * C, dE, 1, x, dE, kRounded, w_cat_op_[l], NH * C, 0, p_.data(), NH * C);
    if (precision_ != Precision::kFp32) ops_->RoundTo(precision_, p_.data(), NH * C);
    caches_[l]->Step(p_.data(), position_, u_.data());
    ops_->GemmPacked(false, false, 1, dE, NH * dV, 1, u_.data(), NH * dV, kRounded, w_o_op_[l], dE, 1, x, dE);
  }
  ++position_;
  logits_ready_ = false;
}

template <typename Real>
void DecodeSession<Real>::Step(int32_t token, Real* logits) {
  Feed(token);
  const ModelDims& d = layout_.dims();
  const int64_t dE = d.d_e, V = d.vocab;
  constexpr auto kRounded = kernels::PackedGemmA::kRounded;
  Real* x = x_.data();
  // PLNorm (step 14) and the logits e^{s_F} · y Ēᵀ.
  if (d.pl_norm) ops_->UnitRowsForward(x, dE, x, dE, nullptr, 1, dE);
  ops_->GemmPacked(false, true, 1, V, dE, head_scale_, x, dE, kRounded, e_bar_op_, dE, 0, logits_.data(), V);
  if (logits != nullptr) ops_->Download(logits_.data(), V, logits);
  logits_ready_ = true;
}

template class DecodeSession<float>;
template class DecodeSession<double>;

}  // namespace multiscreen
