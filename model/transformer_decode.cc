#include "model/transformer_decode.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/rms_norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/screening.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/cpu/unit_rows.h"
#include "model/transformer.h"

namespace multiscreen {

namespace k = kernels::cpu;

template <typename Real>
TransformerDecodeSession<Real>::TransformerDecodeSession(const ModelDims& dims, const Real* params,
                                                         const InferenceOptions& options)
    : layout_(dims, ShardSpec::Full(dims)), yarn_{options.yarn_factor, double(options.train_len)} {
  const int64_t V = dims.vocab, dE = dims.d_e, H = dims.n_heads, dh = dims.d_k;
  const bool screening = dims.attention == AttentionKind::kScreening;
  const Real* w_e = params + layout_.Find("embed/W_E")->buffer_offset;
  table_.resize(V * dE);
  if (dims.sio) {
    k::UnitRowsForward(w_e, dE, table_.data(), dE, static_cast<Real*>(nullptr), V, dE);
    embed_scale_ = static_cast<Real>(std::exp(double(params[layout_.Find("embed/s_E")->buffer_offset])));
    head_scale_ = static_cast<Real>(std::exp(double(params[layout_.Find("head/s_F")->buffer_offset])));
  } else {
    std::copy_n(w_e, V * dE, table_.begin());
  }
  auto at = [&](int64_t l, const char* name) { return params + layout_.Find(ParamLayout::LayerPrefix(l) + name)->buffer_offset; };
  layers_.resize(dims.n_layers);
  for (int64_t l = 0; l < dims.n_layers; ++l) {
    Layer& L = layers_[l];
    L.attn_norm = at(l, "attn_norm");
    L.w_o = at(l, "W_O");
    L.ffn_norm = at(l, "ffn_norm");
    L.w_gu = at(l, "W_gate");
    L.w_down = at(l, "W_down");
    // W_Q, W_K, W_V [N_H, d_E, d_h] → columns of [d_E, 3 d_E], as Transformer::BeginStep packs
    // them: [W_Q heads | W_K heads | W_V heads] (the three parts of each head side by side
    // for screening, which reads them per head).
    L.w_qkv.resize(dE * 3 * dE);
    const char* parts[3] = {"W_Q", "W_K", "W_V"};
    for (int p = 0; p < 3; ++p) {
      const Real* w = at(l, parts[p]);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t column = QkvColumn(dims, p, h, H);
        for (int64_t r = 0; r < dE; ++r) {
          std::copy_n(w + (h * dE + r) * dh, dh, L.w_qkv.begin() + r * 3 * dE + column);
        }
      }
    }
    if (screening) {
      std::vector<Real> s_o(H, Real(0));  // no s_O: scale 1
      for (const kernels::TileScalars& t : MapTileScalars(at(l, "s_w"), at(l, "s_r"), s_o.data(), H, &options)) {
        L.screens.emplace_back(t, dh, dh);
      }
    }
    L.scale.assign(H, 1.0 / std::sqrt(double(dh)));
    if (dims.qk_norm) {
      const Real* s_qk = at(l, "s_QK");
      for (int64_t h = 0; h < H; ++h) L.scale[h] = std::exp(double(s_qk[h]));
    }
    if (dims.attention == AttentionKind::kSsmax) {  // SSMax's s_SS folded in, as Transformer::BeginStep
      const Real* s_ss = at(l, "s_SS");
      for (int64_t h = 0; h < H; ++h) L.scale[h] *= double(s_ss[h]);
    }
    for (double& c : L.scale) c *= k::YarnLogitScale(yarn_.factor);  // YaRN's temperature (1 without)
  }
}

template <typename Real>
void TransformerDecodeSession<Real>::FfnStep(const Layer& L, Real* x) {
  // x += SwiGLU(RMSNorm(x) [W_gate; W_up]ᵀ) W_down.
  const int64_t dE = layout_.dims().d_e, F = layout_.dims().d_ff();
  std::vector<Real> a(dE), gu(2 * F), hidden(F);
  Real rstd;
  k::RmsNormForward(x, L.ffn_norm, a.data(), &rstd, 1, dE);
  k::Gemm<Real>(false, true, 1, 2 * F, dE, 1, a.data(), dE, L.w_gu, dE, 0, gu.data(), 2 * F);
  k::SwiGluForward(gu.data(), hidden.data(), 1, F);
  k::Gemm<Real>(false, false, 1, dE, F, 1, hidden.data(), F, L.w_down, dE, 1, x, dE);
}

template <typename Real>
void TransformerDecodeSession<Real>::Step(int32_t token, Real* logits) {
  const ModelDims& d = layout_.dims();
  const int64_t dE = d.d_e, H = d.n_heads, dh = d.d_k, pos = position_, n = pos + 1;
  std::vector<Real> x(dE), a(dE), qkv(3 * dE), o(dE), hs(dh), norm(H);
  std::vector<double> p(n), z(n), work(n);
  Real rstd;
  const Real* e_row = table_.data() + static_cast<int64_t>(token) * dE;
  for (int64_t c = 0; c < dE; ++c) x[c] = embed_scale_ * e_row[c];
  for (Layer& L : layers_) {
    // a = RMSNorm(x); q, k, v = a W; RoPE at position pos; [unit q, k]; the cache grows by k, v.
    k::RmsNormForward(x.data(), L.attn_norm, a.data(), &rstd, 1, dE);
    k::Gemm<Real>(false, false, 1, 3 * dE, dE, 1, a.data(), dE, L.w_qkv.data(), 3 * dE, 0, qkv.data(), 3 * dE);
    if (!L.screens.empty()) {  // o_h = TanhNorm(h_h), h_h screened over head h's cache
      for (int64_t h = 0; h < H; ++h) {
        const Real* p = qkv.data() + h * 3 * dh;  // [q_h | k_h | v_h]
        L.screens[h].Step(p, p + dh, p + 2 * dh, pos, kernels::PositionKind::kMipe, d.w_th, {}, hs.data());
        k::TileOutputRow(hs.data(), static_cast<const Real*>(nullptr), Real(1), dh, true, o.data() + h * dh);
      }
      k::Gemm<Real>(false, false, 1, dE, dE, 1, o.data(), dE, L.w_o, dE, 1, x.data(), dE);
      FfnStep(L, x.data());
      continue;
    }
    Real *q = qkv.data(), *kn = qkv.data() + dE, *vn = qkv.data() + 2 * dE;
    k::Rope(q, dE, 1, 1, H, dh, false, pos, yarn_);
    k::Rope(kn, dE, 1, 1, H, dh, false, pos, yarn_);
    if (d.qk_norm) {
      k::UnitRowsForward(q, dh, q, dh, norm.data(), H, dh);
      k::UnitRowsForward(kn, dh, kn, dh, norm.data(), H, dh);
    }
    L.k.insert(L.k.end(), kn, kn + dE);
    L.v.insert(L.v.end(), vn, vn + dE);
    // o_h = Σ_j p_j v_j,h over the n cached positions, p the mechanism's weights of the
    // scores z_j = c · q_h · k_j,h, c = scale_h (SSMax: times log n) (fp64 weights).
    const double lambda = k::AttentionLengthFactor(d.attention, pos);
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t c = 0; c < dh; ++c) s += double(q[h * dh + c]) * L.k[j * dE + h * dh + c];
        z[j] = L.scale[h] * lambda * s;
      }
      k::AttentionWeights(d.attention, z.data(), n, p.data(), work.data());
      for (int64_t c = 0; c < dh; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < n; ++j) acc += p[j] * L.v[j * dE + h * dh + c];
        o[h * dh + c] = static_cast<Real>(acc);
      }
    }
    k::Gemm<Real>(false, false, 1, dE, dE, 1, o.data(), dE, L.w_o, dE, 1, x.data(), dE);
    FfnStep(L, x.data());
  }
  // y = x/‖x‖ (pl_norm) or RMSNorm(x) without gain; logits = scale · y tableᵀ.
  if (d.pl_norm) {
    k::UnitRowsForward(x.data(), dE, a.data(), dE, norm.data(), 1, dE);
  } else {
    k::RmsNormForward(x.data(), static_cast<const Real*>(nullptr), a.data(), &rstd, 1, dE);
  }
  k::Gemm<Real>(false, true, 1, d.vocab, dE, head_scale_, a.data(), dE, table_.data(), dE, 0, logits, d.vocab);
  ++position_;
}

template class TransformerDecodeSession<float>;
template class TransformerDecodeSession<double>;

}  // namespace multiscreen
