#include "model/multiscreen.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"
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
  const ShardSpec& shard = layout_.shard();
  const int64_t dE = dims().d_e;
  if (shard.embed || shard.head) {
    const ParamEntry* w_e = layout_.Find("embed/W_E");
    const int64_t rows = shard.vocab();
    e_bar_.resize(rows * dE);
    e_norm_.resize(rows);
    d_e_bar_.assign(rows * dE, Real(0));
    k::UnitRowsForward(params + w_e->buffer_offset, dE, e_bar_.data(), dE, e_norm_.data(), rows, dE);
    e_bar_compute_ = e_bar_;
    RoundToCompute(e_bar_compute_.data(), e_bar_compute_.size());
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
  const ShardSpec& shard = layout_.shard();
  const Real scale = static_cast<Real>(std::exp(double(params[layout_.Find("embed/s_E")->buffer_offset])));
  k::EmbeddingForward(e_bar_compute_.data(), shard.vocab_begin, shard.vocab_end, dims().d_e, ids, n, scale, x);
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
  for (int64_t li = 0; li < layout_.shard().layers(); ++li) {
    LayerActivations& a = acts_[li];
    const LayerWeights& w = weights_[li];
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
    const auto tiles = MapTileScalars(layout_, params, layout_.shard().layer_begin + li, inference);
    k::ScreeningForward(ShapeOf(B, T), a.P.data(), tiles.data(), a.saved(), a.U.data());
    RoundToCompute(a.U.data(), a.U.size());
    // Δ = U · W_O (step 13), summed over the tp group's tiles; x += Δ (step 2).
    k::Gemm<Real>(false, false, rows, dE, nt * dV, 1, a.U.data(), nt * dV, w.w_o.data(), dE, 0, scratch_x_.data(), dE);
    tp_->AllReduce(scratch_x_.data(), rows * dE, ReduceOp::kSum);
    for (int64_t i = 0; i < rows * dE; ++i) x[i] += scratch_x_[i];
  }
}

template <typename Real>
double Multiscreen<Real>::HeadLoss(const Real* params, const Real* x, const int32_t* targets, int64_t n, Real* dx,
                                   Real* grads, double grad_scale, Real* token_losses) {
  const ModelDims& d = dims();
  const ShardSpec& shard = layout_.shard();
  const int64_t dE = d.d_e, Vl = shard.vocab();
  const Real s_f = params[layout_.Find("head/s_F")->buffer_offset];
  const Real scale = static_cast<Real>(std::exp(double(s_f)));
  // PLNorm (step 14): y = x/‖x‖.
  std::vector<Real> y(x, x + n * dE), y_norm(n);
  if (d.pl_norm) k::UnitRowsForward(x, dE, y.data(), dE, y_norm.data(), n, dE);
  std::vector<Real> y_c = y;  // the head GEMMs' operand
  RoundToCompute(y_c.data(), y_c.size());
  const Real* e_bar = e_bar_compute_.data();

  const int64_t chunk = std::max<int64_t>(1, options_.head_chunk_rows);
  std::vector<Real> z(std::min(chunk, n) * Vl);
  std::vector<double> row_max(n), row_sum(n), target_logit(n, 0.0), lse(n);
  std::vector<int64_t> local_target(n);
  for (int64_t r = 0; r < n; ++r) {
    local_target[r] = targets[r] >= shard.vocab_begin && targets[r] < shard.vocab_end ? targets[r] - shard.vocab_begin : -1;
  }
  const bool distributed = tp_->size() > 1;
  std::vector<Real> dy(dx != nullptr ? n * dE : 0);
  std::vector<Real> coef(std::min(chunk, n), static_cast<Real>(grad_scale / double(n)));
  // Logits of rows [r0, r0 + rc): z = e^{s_F} · y Ēᵀ on the local vocabulary.
  auto logits = [&](int64_t r0, int64_t rc) {
    k::Gemm<Real>(false, true, rc, Vl, dE, scale, y_c.data() + r0 * dE, dE, e_bar, dE, 0, z.data(), Vl);
  };
  auto backward = [&](int64_t r0, int64_t rc) {
    k::CrossEntropyGrad(z.data(), Vl, rc, Vl, lse.data() + r0, local_target.data() + r0, coef.data());
    k::Gemm<Real>(true, false, Vl, dE, rc, scale, z.data(), Vl, y_c.data() + r0 * dE, dE, 1, d_e_bar_.data(), dE);
    k::Gemm<Real>(false, false, rc, dE, Vl, scale, z.data(), Vl, e_bar, dE, 0, dy.data() + r0 * dE, dE);
  };
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t rc = std::min(chunk, n - r0);
    logits(r0, rc);
    k::SoftmaxStats(z.data(), Vl, rc, Vl, row_max.data() + r0, row_sum.data() + r0);
    for (int64_t r = 0; r < rc; ++r) {
      if (local_target[r0 + r] >= 0) target_logit[r0 + r] = z[r * Vl + local_target[r0 + r]];
      lse[r0 + r] = row_max[r0 + r] + std::log(row_sum[r0 + r]);
    }
    if (!distributed && dx != nullptr) backward(r0, rc);
  }
  if (distributed) {
    // Vocabulary-parallel softmax: global max, then the rescaled sums, then the target logit.
    std::vector<double> global_max = row_max;
    tp_->AllReduce(global_max.data(), n, ReduceOp::kMax);
    for (int64_t r = 0; r < n; ++r) row_sum[r] *= std::exp(row_max[r] - global_max[r]);
    tp_->AllReduce(row_sum.data(), n, ReduceOp::kSum);
    tp_->AllReduce(target_logit.data(), n, ReduceOp::kSum);
    for (int64_t r = 0; r < n; ++r) lse[r] = global_max[r] + std::log(row_sum[r]);
    if (dx != nullptr) {
      for (int64_t r0 = 0; r0 < n; r0 += chunk) {
        const int64_t rc = std::min(chunk, n - r0);
        logits(r0, rc);
        backward(r0, rc);
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
  tp_->AllReduce(dy.data(), n * dE, ReduceOp::kSum);
  // ∂L/∂s_F = Σ_r y_r · ∂L/∂y_r, since z = e^{s_F} y Ēᵀ.
  double d_sf = 0;
  for (int64_t i = 0; i < n * dE; ++i) d_sf += double(y[i]) * dy[i];
  grads[layout_.Find("head/s_F")->buffer_offset] += static_cast<Real>(d_sf);
  if (d.pl_norm) {
    k::UnitRowsBackward(y.data(), dE, y_norm.data(), dy.data(), dE, dx, dE, n, dE, false);
  } else {
    std::copy(dy.begin(), dy.end(), dx);
  }
  return loss;
}

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
    const auto tiles = MapTileScalars(layout_, params, layout_.shard().layer_begin + li, nullptr);
    k::ScreeningBackward(ShapeOf(B, T), a.P.data(), tiles.data(), a.saved(), d_u_.data(), d_p_.data(),
                         tile_grads.data());
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
  k::EmbeddingBackward(dx, ids, n, shard.vocab_begin, shard.vocab_end, dE, scale, d_e_bar_.data());
  // ∂L/∂s_E = Σ dx · x⁰ with x⁰ = e^{s_E} Ē[ids]; dx and x⁰ are replicated over tp,
  // so the local rows alone would miss the other shards' ids: recompute x⁰ whole.
  std::vector<Real> x0(n * dE);
  Embed(params, ids, n, x0.data());
  double d_se = 0;
  for (int64_t i = 0; i < n * dE; ++i) d_se += double(dx[i]) * x0[i];
  grads[s_e] += static_cast<Real>(d_se);
}

template <typename Real>
void Multiscreen<Real>::EndStep(Real* grads) {
  const ShardSpec& shard = layout_.shard();
  if (!(shard.embed || shard.head)) return;
  const int64_t dE = dims().d_e;
  k::UnitRowsBackward(e_bar_.data(), dE, e_norm_.data(), d_e_bar_.data(), dE,
                      grads + layout_.Find("embed/W_E")->buffer_offset, dE, shard.vocab(), dE, true);
  std::fill(d_e_bar_.begin(), d_e_bar_.end(), Real(0));
}

template <typename Real>
double Multiscreen<Real>::ForwardBackward(const Real* params, const int32_t* tokens, int64_t B, int64_t T, Real* grads,
                                          Real* token_losses, double grad_scale) {
  const int64_t rows = B * T, dE = dims().d_e;
  std::vector<int32_t> inputs(rows), targets(rows);
  for (int64_t b = 0; b < B; ++b) {
    std::copy(tokens + b * (T + 1), tokens + b * (T + 1) + T, inputs.begin() + b * T);
    std::copy(tokens + b * (T + 1) + 1, tokens + (b + 1) * (T + 1), targets.begin() + b * T);
  }
  BeginStep(params);
  std::vector<Real> x(rows * dE), dx(rows * dE);
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
  std::vector<int32_t> inputs(rows), targets(rows);
  for (int64_t b = 0; b < B; ++b) {
    std::copy(tokens + b * (T + 1), tokens + b * (T + 1) + T, inputs.begin() + b * T);
    std::copy(tokens + b * (T + 1) + 1, tokens + (b + 1) * (T + 1), targets.begin() + b * T);
  }
  BeginStep(params);
  std::vector<Real> x(rows * dE);
  Embed(params, inputs.data(), rows, x.data());
  LayersForward(params, B, T, x.data());
  return HeadLoss(params, x.data(), targets.data(), rows, nullptr, nullptr, 1.0, token_losses);
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
  k::Gemm<Real>(false, true, T, V, dE, scale, x.data(), dE, e_bar_compute_.data(), dE, 0, logits, V);
}

template class Multiscreen<float>;
template class Multiscreen<double>;

}  // namespace multiscreen
