#include "model/multiscreen.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/head_panels.h"
#include "kernels/cpu/unit_rows.h"

namespace multiscreen {

namespace k = kernels::cpu;

template <typename Real>
kernels::cpu::ScreeningSaved<Real> Multiscreen<Real>::LayerActivations::saved() {
  return {q_tilde.data(), k_tilde.data(), v_bar.data(), q_norm.data(), k_norm.data(), v_norm.data(), h.data()};
}

template <typename Real>
Multiscreen<Real>::Multiscreen(const ModelDims& dims, const ShardSpec& shard, ModelOptions options, Communicator* tp)
    : layout_(dims, shard), options_(options), tp_(tp != nullptr ? tp : &single_) {
  weights_.resize(shard.layers());
  acts_.resize(shard.layers());
}

template <typename Real>
void Multiscreen<Real>::RoundToCompute(Real* data, int64_t n) const {
  if constexpr (std::is_same_v<Real, float>) {
    if (options_.precision == Precision::kBf16) k::RoundToBf16(data, n);
    if (options_.precision == Precision::kFp16) k::RoundToFp16(data, n);
  }
}

template <typename Real>
void Multiscreen<Real>::RoundGradientToCompute(Real* data, int64_t n) const {
  if constexpr (std::is_same_v<Real, float>) {
    if (options_.precision == Precision::kFp16) k::RoundToFp16(data, n);
  }
}

template <typename Real>
kernels::cpu::ScreeningShape Multiscreen<Real>::ShapeOf(int64_t B, int64_t T) const {
  k::ScreeningShape s;
  s.batch = B;
  s.seq = T;
  s.tiles = layout_.shard().tiles();
  s.d_k = dims().d_k;
  s.d_v = dims().d_v;
  s.w_th = dims().w_th;
  return s;
}

template <typename Real>
void Multiscreen<Real>::BeginStep(const Real* params) {
  PhaseTimer timer(options_.profile, StepProfile::kEmbed);
  const ShardSpec& shard = layout_.shard();
  const int64_t dE = dims().d_e;
  if (shard.embed || shard.head) {
    const ParamEntry* w_e = layout_.Find("embed/W_E");
    const int64_t rows = shard.vocab();
    e_bar_.resize(rows * dE);
    e_norm_.resize(rows);
    d_e_bar_.assign(rows * dE, Real(0));
    k::UnitRowsForward(params + w_e->buffer_offset, dE, e_bar_.data(), dE, e_norm_.data(), rows, dE);
    if (options_.precision != Precision::kFp32) {
      e_bar_compute_ = e_bar_;
      RoundToCompute(e_bar_compute_.data(), e_bar_compute_.size());
    }
    // Ē in panels for the head's kernels, once per step however many micro-batches
    // (HeadLoss uses them when e^{s_F} also allows the fixed shift).
    if (PanelsAllowed()) {
      head_.e_bar_panels.resize(k::HeadPanelCount(rows) * dE * k::kHeadPanel);
      k::PackHeadPanels(EBarCompute(), rows, dE, head_.e_bar_panels.data());
    }
  }
  for (int64_t li = 0; li < shard.layers(); ++li) {
    LayerWeights& w = weights_[li];
    const int64_t layer = shard.layer_begin + li;
    PackProjections(layout_, params, layer, &w.w_cat);
    const Real* w_o = params + layout_.entries()[layout_.LayerEntry(layer) + kWO].buffer_offset;
    w.w_o.assign(w_o, w_o + layout_.entries()[layout_.LayerEntry(layer) + kWO].size());
    RoundToCompute(w.w_cat.data(), w.w_cat.size());
    RoundToCompute(w.w_o.data(), w.w_o.size());
  }
}

template <typename Real>
void Multiscreen<Real>::Embed(const Real* params, const int32_t* ids, int64_t n, Real* x) {
  PhaseTimer timer(options_.profile, StepProfile::kEmbed);
  const ShardSpec& shard = layout_.shard();
  const Real scale = static_cast<Real>(std::exp(double(params[layout_.Find("embed/s_E")->buffer_offset])));
  k::EmbeddingForward(EBarCompute(), shard.vocab_begin, shard.vocab_end, dims().d_e, ids, n, scale, x);
  tp_->AllReduce(x, n * dims().d_e, ReduceOp::kSum);
}

template <typename Real>
void Multiscreen<Real>::LayersForward(const Real* params, int64_t B, int64_t T, Real* x,
                                      const InferenceOptions* inference) {
  const ModelDims& d = dims();
  const int64_t nt = layout_.shard().tiles(), dE = d.d_e, dK = d.d_k, dV = d.d_v;
  const int64_t rows = B * T, C = 2 * dK + 2 * dV;
  batch_ = B;
  seq_ = T;
  scratch_x_.resize(rows * dE);
  StepProfile* profile = options_.profile;
  for (int64_t li = 0; li < layout_.shard().layers(); ++li) {
    LayerActivations& a = acts_[li];
    const LayerWeights& w = weights_[li];
    std::optional<PhaseTimer> timer(std::in_place, profile, StepProfile::kProjections);
    a.x_in.assign(x, x + rows * dE);
    a.P.resize(rows * nt * C);
    a.U.resize(rows * nt * dV);
    a.q_tilde.resize(rows * nt * dK);
    a.k_tilde.resize(rows * nt * dK);
    a.v_bar.resize(rows * nt * dV);
    a.h.resize(rows * nt * dV);
    a.q_norm.resize(rows * nt);
    a.k_norm.resize(rows * nt);
    a.v_norm.resize(rows * nt);
    // P = x · [W_Q|W_K|W_V|W_G] for all local tiles: one GEMM (spec step 3). The
    // stored x_in and U are the GEMM operands, so they hold the compute precision.
    RoundToCompute(a.x_in.data(), a.x_in.size());
    k::Gemm<Real>(false, false, rows, nt * C, dE, 1, a.x_in.data(), dE, w.w_cat.data(), nt * C, 0, a.P.data(), nt * C);
    RoundToCompute(a.P.data(), a.P.size());
    timer.emplace(profile, StepProfile::kScreeningForward);
    const auto tiles = MapTileScalars(layout_, params, layout_.shard().layer_begin + li, inference);
    k::ScreeningForward(ShapeOf(B, T), a.P.data(), tiles.data(), a.saved(), a.U.data(), &screening_ws_);
    RoundToCompute(a.U.data(), a.U.size());
    timer.emplace(profile, StepProfile::kOutputGemm);
    // Δ = U · W_O (step 13), summed over the tp group's tiles; x += Δ (step 2).
    k::Gemm<Real>(false, false, rows, dE, nt * dV, 1, a.U.data(), nt * dV, w.w_o.data(), dE, 0, scratch_x_.data(), dE);
    tp_->AllReduce(scratch_x_.data(), rows * dE, ReduceOp::kSum);
    for (int64_t i = 0; i < rows * dE; ++i) x[i] += scratch_x_[i];
  }
}

template <typename Real>
double Multiscreen<Real>::HeadLoss(const Real* params, const Real* x, const int32_t* targets, int64_t n, Real* dx,
                                   Real* grads, double grad_scale, Real* token_losses) {
  PhaseTimer timer(options_.profile, StepProfile::kHead);
  const ModelDims& d = dims();
  const ShardSpec& shard = layout_.shard();
  const int64_t dE = d.d_e, Vl = shard.vocab();
  const Real s_f = params[layout_.Find("head/s_F")->buffer_offset];
  const Real scale = static_cast<Real>(std::exp(double(s_f)));
  HeadBuffers& hb = head_;
  // PLNorm (step 14): y = x/‖x‖.
  hb.y.assign(x, x + n * dE);
  hb.y_norm.resize(n);
  if (d.pl_norm) k::UnitRowsForward(x, dE, hb.y.data(), dE, hb.y_norm.data(), n, dE);
  const Real* y_c = hb.y.data();  // the head GEMMs' operand
  if (options_.precision != Precision::kFp32) {
    hb.y_c.assign(hb.y.begin(), hb.y.end());
    RoundToCompute(hb.y_c.data(), hb.y_c.size());
    y_c = hb.y_c.data();
  }
  const Real* e_bar = EBarCompute();

  const bool distributed = tp_->size() > 1;
  // With PLNorm |z| ≤ e^{s_F} (unit y, unit rows of Ē), so below e^{s_F} = 39 that bound
  // is a safe softmax shift and the max pass is not needed.
  const double shift = d.pl_norm && scale < 39 ? 1.01 * double(scale) : std::nan("");
  const bool panels = !distributed && UsesHeadPanels(shift);
  const int64_t chunk = std::min(std::max<int64_t>(1, options_.head_chunk_rows), n);
  hb.z.resize(chunk * (panels ? k::HeadPanelCount(Vl) * k::kHeadPanel : Vl));
  hb.row_max.resize(n);
  hb.row_sum.resize(n);
  hb.lse.resize(n);
  hb.target_logit.assign(n, 0.0);
  hb.local_target.resize(n);
  for (int64_t r = 0; r < n; ++r) {
    hb.local_target[r] =
        targets[r] >= shard.vocab_begin && targets[r] < shard.vocab_end ? targets[r] - shard.vocab_begin : -1;
  }
  hb.dy.resize(dx != nullptr ? n * dE : 0);
  hb.coef.assign(chunk, static_cast<Real>(grad_scale / double(n)));
  Real* z = hb.z.data();
  double *lse = hb.lse.data(), *target_logit = hb.target_logit.data();
  const int64_t* local_target = hb.local_target.data();
  // Logits of rows [r0, r0 + rc): z = e^{s_F} · y Ēᵀ on the local vocabulary.
  auto logits = [&](int64_t r0, int64_t rc) {
    k::Gemm<Real>(false, true, rc, Vl, dE, scale, y_c + r0 * dE, dE, e_bar, dE, 0, z, Vl);
  };
  // With z holding ∂L/∂z/e^{s_F}: dĒ += e^{s_F} zᵀ y, dy = e^{s_F} z Ē. dĒ is gathered
  // transposed, dĒᵀ [d_E, V] = e^{s_F} yᵀ z (BLAS runs this shape faster), or in Ē's
  // panels, in a buffer that is all zeros between calls, and moved into d_e_bar_ once
  // at the end.
  if (panels) {  // Ē's panels were packed by BeginStep
    hb.d_e_bar_panels.resize(dx != nullptr ? hb.e_bar_panels.size() : 0);
  } else if (dx != nullptr) {
    hb.d_e_bar_t.resize(dE * Vl);
  }
  auto backward_gemms = [&](int64_t r0, int64_t rc) {
    k::Gemm<Real>(true, false, dE, Vl, rc, scale, y_c + r0 * dE, dE, z, Vl, 1, hb.d_e_bar_t.data(), Vl);
    k::Gemm<Real>(false, false, rc, dE, Vl, scale, z, Vl, e_bar, dE, 0, hb.dy.data() + r0 * dE, dE);
  };
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t rc = std::min(chunk, n - r0);
    if (!distributed && dx != nullptr) {
      FusedHeadChunk(Vl, rc, r0, y_c, e_bar, scale, shift, lse + r0, target_logit + r0);
      continue;
    }
    if (panels) {  // the loss alone
      PanelSoftmax(Vl, rc, r0, y_c, e_bar, scale, shift, lse + r0, target_logit + r0, nullptr);
      continue;
    }
    logits(r0, rc);
    k::SoftmaxStats(z, Vl, rc, Vl, hb.row_max.data() + r0, hb.row_sum.data() + r0);
    for (int64_t r = 0; r < rc; ++r) {
      if (local_target[r0 + r] >= 0) target_logit[r0 + r] = z[r * Vl + local_target[r0 + r]];
      lse[r0 + r] = hb.row_max[r0 + r] + std::log(hb.row_sum[r0 + r]);
    }
  }
  if (distributed) {
    // Vocabulary-parallel softmax: global max, then the rescaled sums, then the target logit.
    std::vector<double> global_max = hb.row_max;
    tp_->AllReduce(global_max.data(), n, ReduceOp::kMax);
    for (int64_t r = 0; r < n; ++r) hb.row_sum[r] *= std::exp(hb.row_max[r] - global_max[r]);
    tp_->AllReduce(hb.row_sum.data(), n, ReduceOp::kSum);
    tp_->AllReduce(target_logit, n, ReduceOp::kSum);
    for (int64_t r = 0; r < n; ++r) lse[r] = global_max[r] + std::log(hb.row_sum[r]);
    if (dx != nullptr) {
      for (int64_t r0 = 0; r0 < n; r0 += chunk) {
        const int64_t rc = std::min(chunk, n - r0);
        logits(r0, rc);
        k::CrossEntropyGrad(z, Vl, rc, Vl, lse + r0, local_target + r0, hb.coef.data());
        backward_gemms(r0, rc);
      }
    }
  }
  double loss = 0;
  for (int64_t r = 0; r < n; ++r) {
    const double l = lse[r] - target_logit[r];
    loss += l;
    if (token_losses != nullptr) token_losses[r] = static_cast<Real>(l);
  }
  loss /= double(n);
  if (dx == nullptr) return loss;
  if (panels) {
    k::UnpackHeadPanelsAdd(hb.d_e_bar_panels.data(), Vl, dE, d_e_bar_.data());
  } else {
    k::MoveAddTransposed(hb.d_e_bar_t.data(), dE, Vl, Vl, d_e_bar_.data(), dE);
  }
  tp_->AllReduce(hb.dy.data(), n * dE, ReduceOp::kSum);
  // ∂L/∂s_F = Σ_r y_r · ∂L/∂y_r, since z = e^{s_F} y Ēᵀ.
  double d_sf = 0;
  for (int64_t i = 0; i < n * dE; ++i) d_sf += double(hb.y[i]) * hb.dy[i];
  grads[layout_.Find("head/s_F")->buffer_offset] += static_cast<Real>(d_sf);
  if (d.pl_norm) {
    k::UnitRowsBackward(hb.y.data(), dE, hb.y_norm.data(), hb.dy.data(), dE, dx, dE, n, dE, false);
  } else {
    std::copy(hb.dy.begin(), hb.dy.end(), dx);
  }
  return loss;
}

template <typename Real>
void Multiscreen<Real>::FusedHeadChunk(int64_t Vl, int64_t rc, int64_t r0, const Real* y_c, const Real* e_bar, Real scale,
                                       double shift, double* lse, double* target_logit) {
  // The softmax's numerators z ← exp(z − m) replace the logits; the softmax's 1/Σ_v and
  // the loss's coefficient c are folded into the backward contractions' small operands,
  // and the targets' one-hot part of ∂L/∂z = c (softmax − onehot) is added apart:
  //   dĒ += e^{s_F} (c/Σ ⊙ y)ᵀ z − one-hot,   dy = c/Σ ⊙ e^{s_F} z Ē − one-hot.
  HeadBuffers& hb = head_;
  const int64_t dE = dims().d_e;
  const int64_t* target = hb.local_target.data() + r0;
  const Real* y = y_c + r0 * dE;
  Real* z = hb.z.data();
  Real* dy = hb.dy.data() + r0 * dE;
  hb.row_scale.resize(rc);
  hb.y_scaled.resize(rc * dE);
  const bool panels = UsesHeadPanels(shift);
  const int64_t np = k::HeadPanelCount(Vl);
  if (!panels) {
    // The logits whole (GEMM), then the softmax with the fixed shift or each row's max.
    k::Gemm<Real>(false, true, rc, Vl, dE, scale, y, dE, e_bar, dE, 0, z, Vl);
    k::SoftmaxNumerators(z, Vl, rc, Vl, shift, target, lse, target_logit, hb.row_scale.data());
    k::Gemm<Real>(false, false, rc, dE, Vl, 1, z, Vl, e_bar, dE, 0, dy, dE);
  } else {
    PanelSoftmax(Vl, rc, r0, y_c, e_bar, scale, shift, lse, target_logit, dy);
  }
  for (int64_t r = 0; r < rc; ++r) {  // c e^{s_F}/Σ_r, then the one-hot part
    const Real c = static_cast<Real>(double(scale) * double(hb.coef[r]) * hb.row_scale[r]);
    for (int64_t j = 0; j < dE; ++j) {
      hb.y_scaled[r * dE + j] = c * y[r * dE + j];
      dy[r * dE + j] *= c;
    }
    if (target[r] < 0) continue;
    const Real c_target = scale * hb.coef[r];
    const Real* e_t = e_bar + target[r] * dE;
    Real* de_t = d_e_bar_.data() + target[r] * dE;
    for (int64_t j = 0; j < dE; ++j) {
      dy[r * dE + j] -= c_target * e_t[j];
      de_t[j] -= c_target * y[r * dE + j];
    }
  }
  if (panels) {
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < np; ++p) {
      k::HeadPanelsGradAdd(hb.y_scaled.data(), rc, dE, z + p * rc * k::kHeadPanel, p, p + 1, hb.d_e_bar_panels.data());
    }
  } else {
    k::Gemm<Real>(true, false, dE, Vl, rc, 1, hb.y_scaled.data(), dE, z, Vl, 1, hb.d_e_bar_t.data(), Vl);
  }
}

template <typename Real>
void Multiscreen<Real>::PanelSoftmax(int64_t Vl, int64_t rc, int64_t r0, const Real* y_c, const Real* e_bar, Real scale,
                                     double shift, double* lse, double* target_logit, Real* dy) {
  // A fixed shift needs no pass over whole rows first, so the vocabulary goes in blocks
  // of panels, each thread on its own, while a block is in cache: its numerators, their
  // row sums and (for gradients) its part of z Ē. Blocks are summed in order, whatever
  // the threads.
  HeadBuffers& hb = head_;
  const int64_t dE = dims().d_e, np = k::HeadPanelCount(Vl);
  const int64_t* target = hb.local_target.data() + r0;
  const Real* y = y_c + r0 * dE;
  Real* z = hb.z.data();
  const int64_t block = std::max<int64_t>(1, options_.head_vocab_block);  // whole panels, at least one
  const int64_t per_block = block / k::kHeadPanel + (block % k::kHeadPanel != 0);
  const int64_t nb = (np + per_block - 1) / per_block;
  hb.block_sum.assign(nb * rc, 0.0);
  hb.block_dy.resize(dy != nullptr ? nb * rc * dE : 0);
  hb.row_scale.resize(rc);
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nb; ++blk) {
    const int64_t p0 = blk * per_block, p1 = std::min(np, p0 + per_block);
    Real* z_block = z + p0 * rc * k::kHeadPanel;
    k::HeadNumerators(y, rc, dE, hb.e_bar_panels.data(), p0, p1, Vl, scale, static_cast<Real>(shift), z_block,
                      hb.block_sum.data() + blk * rc);
    if (dy != nullptr) k::HeadNumeratorsEBar(z_block, rc, dE, e_bar, p0, p1, Vl, hb.block_dy.data() + blk * rc * dE);
  }
  for (int64_t r = 0; r < rc; ++r) {
    double sum = 0;
    for (int64_t blk = 0; blk < nb; ++blk) sum += hb.block_sum[blk * rc + r];
    lse[r] = shift + std::log(sum);
    hb.row_scale[r] = 1.0 / sum;
    if (target[r] < 0) continue;
    double dot = 0;
    for (int64_t j = 0; j < dE; ++j) dot += double(y[r * dE + j]) * double(e_bar[target[r] * dE + j]);
    target_logit[r] = double(scale) * dot;
  }
  if (dy == nullptr) return;
  std::fill(dy, dy + rc * dE, Real(0));
  for (int64_t blk = 0; blk < nb; ++blk) {
    const Real* part = hb.block_dy.data() + blk * rc * dE;
    for (int64_t i = 0; i < rc * dE; ++i) dy[i] += part[i];
  }
}

template <typename Real>
bool Multiscreen<Real>::UsesHeadPanels(double shift) const {
  return !std::isnan(shift) && PanelsAllowed();
}

template <typename Real>
bool Multiscreen<Real>::PanelsAllowed() const {
  return layout_.shard().head && HeadPanelsAllowed<Real>(dims(), tp_->size(), options_.head_path);
}

template <typename Real>
bool HeadPanelsAllowed(const ModelDims& dims, int64_t tp, HeadPath path) {
  return path == HeadPath::kPanels && dims.pl_norm && tp == 1 && k::HeadPanelsSupport<Real>(dims.d_e);
}
template bool HeadPanelsAllowed<float>(const ModelDims&, int64_t, HeadPath);
template bool HeadPanelsAllowed<double>(const ModelDims&, int64_t, HeadPath);

template <typename Real>
void Multiscreen<Real>::LayersBackward(const Real* params, Real* dx, Real* grads) {
  const ModelDims& d = dims();
  const int64_t nt = layout_.shard().tiles(), dE = d.d_e, dK = d.d_k, dV = d.d_v;
  const int64_t B = batch_, T = seq_, rows = B * T, C = 2 * dK + 2 * dV;
  const auto& entries = layout_.entries();
  d_u_.resize(rows * nt * dV);
  d_p_.resize(rows * nt * C);
  d_w_cat_.resize(dE * nt * C);
  scratch_x_.resize(rows * dE);
  std::vector<k::TileScalarGrads> tile_grads(nt);
  for (int64_t li = layout_.shard().layers() - 1; li >= 0; --li) {
    LayerActivations& a = acts_[li];
    const LayerWeights& w = weights_[li];
    const int64_t first = layout_.LayerEntry(layout_.shard().layer_begin + li);
    std::optional<PhaseTimer> timer(std::in_place, options_.profile, StepProfile::kOutputGemm);
    // Δ = U · W_O: dU = dΔ · W_Oᵀ, dW_O += Uᵀ dΔ (dΔ = dx, the residual passes it through).
    const Real* d_delta = dx;
    if (options_.precision == Precision::kFp16) {
      d_delta_.assign(dx, dx + rows * dE);
      RoundGradientToCompute(d_delta_.data(), d_delta_.size());
      d_delta = d_delta_.data();
    }
    k::Gemm<Real>(false, true, rows, nt * dV, dE, 1, d_delta, dE, w.w_o.data(), dE, 0, d_u_.data(), nt * dV);
    k::Gemm<Real>(true, false, nt * dV, dE, rows, 1, a.U.data(), nt * dV, d_delta, dE, 1,
                  grads + entries[first + kWO].buffer_offset, dE);
    timer.emplace(options_.profile, StepProfile::kScreeningBackward);
    const auto tiles = MapTileScalars(layout_, params, layout_.shard().layer_begin + li, nullptr);
    k::ScreeningBackward(ShapeOf(B, T), a.P.data(), tiles.data(), a.saved(), d_u_.data(), d_p_.data(),
                         tile_grads.data(), &screening_ws_);
    // Scalars: w = e^{s_w} + 1, r = σ(s_r), scale = e^{s_O}.
    Real* g_sw = grads + entries[first + kSw].buffer_offset;
    Real* g_sr = grads + entries[first + kSr].buffer_offset;
    Real* g_so = grads + entries[first + kSO].buffer_offset;
    for (int64_t t = 0; t < nt; ++t) {
      g_sw[t] += static_cast<Real>(tile_grads[t].w * (tiles[t].w - 1.0));
      g_sr[t] += static_cast<Real>(tile_grads[t].r * tiles[t].r * (1.0 - tiles[t].r));
      g_so[t] += static_cast<Real>(tile_grads[t].scale * tiles[t].scale);
    }
    // P = x · W_cat: dW_cat = xᵀ dP (unpacked per tile), dx += dP · W_catᵀ (tp-summed).
    timer.emplace(options_.profile, StepProfile::kProjections);
    RoundGradientToCompute(d_p_.data(), d_p_.size());
    k::Gemm<Real>(true, false, dE, nt * C, rows, 1, a.x_in.data(), dE, d_p_.data(), nt * C, 0, d_w_cat_.data(), nt * C);
    UnpackProjectionsAdd(layout_, d_w_cat_.data(), layout_.shard().layer_begin + li, grads);
    k::Gemm<Real>(false, true, rows, dE, nt * C, 1, d_p_.data(), nt * C, w.w_cat.data(), nt * C, 0,
                  scratch_x_.data(), dE);
    tp_->AllReduce(scratch_x_.data(), rows * dE, ReduceOp::kSum);
    for (int64_t i = 0; i < rows * dE; ++i) dx[i] += scratch_x_[i];
  }
}

template <typename Real>
void Multiscreen<Real>::EmbedBackward(const Real* params, const int32_t* ids, int64_t n, const Real* dx, Real* grads) {
  const ShardSpec& shard = layout_.shard();
  const int64_t dE = dims().d_e;
  const int64_t s_e = layout_.Find("embed/s_E")->buffer_offset;
  const Real scale = static_cast<Real>(std::exp(double(params[s_e])));
  {
    PhaseTimer timer(options_.profile, StepProfile::kEmbed);
    k::EmbeddingBackward(dx, ids, n, shard.vocab_begin, shard.vocab_end, dE, scale, d_e_bar_.data());
  }
  // ∂L/∂s_E = Σ dx · x⁰ with x⁰ = e^{s_E} Ē[ids]; dx and x⁰ are replicated over tp,
  // so the local rows alone would miss the other shards' ids: recompute x⁰ whole.
  std::vector<Real>& x0 = step_x0_;
  x0.resize(n * dE);
  Embed(params, ids, n, x0.data());
  PhaseTimer timer(options_.profile, StepProfile::kEmbed);
  double d_se = 0;
  for (int64_t i = 0; i < n * dE; ++i) d_se += double(dx[i]) * x0[i];
  grads[s_e] += static_cast<Real>(d_se);
}

template <typename Real>
void Multiscreen<Real>::EndStep(Real* grads) {
  PhaseTimer timer(options_.profile, StepProfile::kEmbed);
  const ShardSpec& shard = layout_.shard();
  if (!(shard.embed || shard.head)) return;
  const int64_t dE = dims().d_e;
  k::UnitRowsBackward(e_bar_.data(), dE, e_norm_.data(), d_e_bar_.data(), dE,
                      grads + layout_.Find("embed/W_E")->buffer_offset, dE, shard.vocab(), dE, true);
}

// Windows [B, T+1] → inputs (the first T of each) and next-token targets
// (the last T), both [B·T], into the step's reused buffers.
template <typename Real>
void Multiscreen<Real>::SplitWindows(const int32_t* tokens, int64_t B, int64_t T) {
  step_inputs_.resize(B * T);
  step_targets_.resize(B * T);
  for (int64_t b = 0; b < B; ++b) {
    std::copy(tokens + b * (T + 1), tokens + b * (T + 1) + T, step_inputs_.begin() + b * T);
    std::copy(tokens + b * (T + 1) + 1, tokens + (b + 1) * (T + 1), step_targets_.begin() + b * T);
  }
}

template <typename Real>
double Multiscreen<Real>::ForwardBackward(const Real* params, const int32_t* tokens, int64_t B, int64_t T, Real* grads,
                                          Real* token_losses, double grad_scale) {
  const int64_t rows = B * T, dE = dims().d_e;
  SplitWindows(tokens, B, T);
  const std::vector<int32_t>&inputs = step_inputs_, &targets = step_targets_;
  BeginStep(params);
  std::vector<Real>&x = step_x_, &dx = step_dx_;
  x.resize(rows * dE);
  dx.resize(rows * dE);
  Embed(params, inputs.data(), rows, x.data());
  LayersForward(params, B, T, x.data());
  const double loss = HeadLoss(params, x.data(), targets.data(), rows, dx.data(), grads, grad_scale, token_losses);
  LayersBackward(params, dx.data(), grads);
  EmbedBackward(params, inputs.data(), rows, dx.data(), grads);
  EndStep(grads);
  return loss;
}

template <typename Real>
double Multiscreen<Real>::Loss(const Real* params, const int32_t* tokens, int64_t B, int64_t T, Real* token_losses) {
  const int64_t rows = B * T, dE = dims().d_e;
  SplitWindows(tokens, B, T);
  BeginStep(params);
  std::vector<Real> x(rows * dE);
  Embed(params, step_inputs_.data(), rows, x.data());
  LayersForward(params, B, T, x.data());
  return HeadLoss(params, x.data(), step_targets_.data(), rows, nullptr, nullptr, 1.0, token_losses);
}

template <typename Real>
void Multiscreen<Real>::Logits(const Real* params, const int32_t* ids, int64_t T, const InferenceOptions& options,
                               Real* logits) {
  const ModelDims& d = dims();
  const int64_t dE = d.d_e, V = layout_.shard().vocab();
  BeginStep(params);
  std::vector<Real> x(T * dE);
  Embed(params, ids, T, x.data());
  LayersForward(params, 1, T, x.data(), &options);
  if (d.pl_norm) k::UnitRowsForward(x.data(), dE, x.data(), dE, static_cast<Real*>(nullptr), T, dE);
  const Real scale = static_cast<Real>(std::exp(double(params[layout_.Find("head/s_F")->buffer_offset])));
  k::Gemm<Real>(false, true, T, V, dE, scale, x.data(), dE, EBarCompute(), dE, 0, logits, V);
}

template class Multiscreen<float>;
template class Multiscreen<double>;

}  // namespace multiscreen
