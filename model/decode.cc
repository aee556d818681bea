#include "model/decode.h"

#include <cmath>

namespace multiscreen {

template <typename Real>
DecodeSession<Real>::DecodeSession(const ModelDims& dims, const Real* params, const InferenceOptions& options,
                                   const ModelOptions& placement)
    : Decoder<Real>(placement, dims.vocab),
      layout_(dims, ShardSpec::Full(dims)),
      precision_(placement.precision),
      e_bar_(placement.device),
      x_(placement.device), p_(placement.device), u_(placement.device) {
  const int64_t V = dims.vocab, dE = dims.d_e, nt = dims.n_heads;
  Real s[3];  // s_E, s_F; then a layer's s_w, s_r, s_O (adjacent in the layout)
  ops().Download(params + layout_.Find("embed/s_E")->buffer_offset, 1, &s[0]);
  ops().Download(params + layout_.Find("head/s_F")->buffer_offset, 1, &s[1]);
  embed_scale_ = static_cast<Real>(std::exp(double(s[0])));
  head_scale_ = static_cast<Real>(std::exp(double(s[1])));
  e_bar_.Resize(V * dE);
  ops().UnitRowsForward(params + layout_.Find("embed/W_E")->buffer_offset, dE, e_bar_.data(), dE, nullptr, V, dE);
  if (precision_ != Precision::kFp32) ops().RoundTo(precision_, e_bar_.data(), V * dE);
  ops().PackOperand(precision_, e_bar_.data(), V * dE, &e_bar_op_);
  // The layers' screening shape, as the model's forward at inference has it.
  const kernels::ScreeningShape shape = MultiscreenShape(dims, nt, 0, 0, &options);
  const auto& entries = layout_.entries();
  std::vector<Real> scalars(3 * nt);
  w_cat_op_.resize(dims.n_layers);
  w_o_op_.resize(dims.n_layers);
  for (int64_t l = 0; l < dims.n_layers; ++l) {
    w_cat_.emplace_back(placement.device);
    PackProjections(ops(), layout_, params, l, &w_cat_[l]);
    if (precision_ != Precision::kFp32) ops().RoundTo(precision_, w_cat_[l].data(), w_cat_[l].size());
    ops().PackOperand(precision_, w_cat_[l].data(), w_cat_[l].size(), &w_cat_op_[l]);
    const ParamEntry& w_o = entries[layout_.MultiscreenEntry(l, kWO)];
    ops().PackOperand(precision_, params + w_o.buffer_offset, w_o.size(), &w_o_op_[l]);
    ops().Download(params + entries[layout_.MultiscreenEntry(l, kSw)].buffer_offset, 3 * nt, scalars.data());
    const auto tiles = MapTileScalars(scalars.data(), scalars.data() + nt, scalars.data() + 2 * nt, nt, &options);
    caches_.push_back(ScreeningCacheFor<Real>(placement.device, shape, tiles));
  }
  x_.Resize(dE);
  p_.Resize(nt * shape.p_cols());
  u_.Resize(nt * dims.d_v);
  LogitsRows(1);  // the logits of a token, allocated with the session
}

template <typename Real>
int64_t DecodeSession<Real>::CachedKeys(int64_t layer, int64_t tile) const {
  return caches_[layer]->CachedKeys(tile, position_);
}

template <typename Real>
void DecodeSession<Real>::FeedRows(const int32_t* tokens, int64_t rows) {
  const ModelDims& d = layout_.dims();
  const int64_t dE = d.d_e, NH = d.n_heads, dV = d.d_v, C = 2 * d.d_k + (d.output_gate ? 2 : 1) * dV, V = d.vocab;
  const int64_t p_cols = NH * C, u_cols = NH * dV;
  constexpr auto kRounded = kernels::PackedGemmA::kRounded;  // nothing else rounds the rows
  x_.Resize(rows * dE);
  p_.Resize(rows * p_cols);
  u_.Resize(rows * u_cols);
  Real *x = x_.data(), *p = p_.data(), *u = u_.data();
  ops().EmbeddingForward(e_bar_.data(), 0, V, dE, tokens, rows, embed_scale_, x);
  for (int64_t l = 0; l < d.n_layers; ++l) {
    // P = x · W_cat (spec step 3); U = the tiles' screening of each token in order
    // (steps 5–13, the cache growing by one token a row); x += U · W_O (step 13, 2).
    // GemmPacked rounds x and U as it reads them.
    ops().GemmPacked(false, false, rows, p_cols, dE, 1, x, dE, kRounded, w_cat_op_[l], p_cols, 0, p, p_cols);
    if (precision_ != Precision::kFp32) ops().RoundTo(precision_, p, rows * p_cols);
    caches_[l]->StepRows(p, p_cols, rows, position_, u, u_cols);
    ops().GemmPacked(false, false, rows, dE, u_cols, 1, u, u_cols, kRounded, w_o_op_[l], dE, 1, x, dE);
  }
  position_ += rows;
}

template <typename Real>
void DecodeSession<Real>::HeadRows(int64_t rows) {
  const ModelDims& d = layout_.dims();
  const int64_t dE = d.d_e, V = d.vocab;
  constexpr auto kRounded = kernels::PackedGemmA::kRounded;
  Real* x = x_.data();
  // PLNorm (step 14) and the logits e^{s_F} · y Ēᵀ.
  if (d.pl_norm) ops().UnitRowsForward(x, dE, x, dE, nullptr, rows, dE);
  ops().GemmPacked(false, true, rows, V, dE, head_scale_, x, dE, kRounded, e_bar_op_, dE, 0, LogitsRows(rows), V);
}

template class DecodeSession<float>;
template class DecodeSession<double>;

}  // namespace multiscreen
