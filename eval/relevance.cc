#include "eval/relevance.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "kernels/cpu/rope.h"
#include "model/param_layout.h"

namespace multiscreen::eval {
namespace {

constexpr double kPi = std::numbers::pi;

// Unit rows (floor 1e-12 on the norm), in place: spec step 5.
void Normalize(double* z, int64_t d) {
  double n = 0;
  for (int64_t c = 0; c < d; ++c) n += z[c] * z[c];
  n = std::max(std::sqrt(n), 1e-12);
  for (int64_t c = 0; c < d; ++c) z[c] /= n;
}

}  // namespace

std::vector<TileRelevance> InspectRelevance(const Weights& weights, const InferenceOptions& options,
                                            const std::vector<int32_t>& ids,
                                            const std::vector<std::vector<bool>>& keep, std::vector<double>* logits) {
  const ModelDims& d = weights.dims;
  const ParamLayout layout(d, ShardSpec::Full(d));
  const float* params = weights.params.data();
  const int64_t T = static_cast<int64_t>(ids.size()), dE = d.d_e, dK = d.d_k, dV = d.d_v, V = d.vocab;
  auto at = [&](const std::string& name) { return params + layout.Find(name)->buffer_offset; };
  // Step 1: Ē (unit rows of W_E), x⁰ = e^{s_E} Ē[t].
  std::vector<double> e_bar(V * dE);
  const float* w_e = at("embed/W_E");
  for (int64_t v = 0; v < V; ++v) {
    for (int64_t c = 0; c < dE; ++c) e_bar[v * dE + c] = w_e[v * dE + c];
    Normalize(&e_bar[v * dE], dE);
  }
  const double s_e = std::exp(double(*at("embed/s_E")));
  std::vector<double> x(T * dE), delta(T * dE);
  for (int64_t i = 0; i < T; ++i) {
    for (int64_t c = 0; c < dE; ++c) x[i * dE + c] = s_e * e_bar[ids[i] * dE + c];
  }
  std::vector<TileRelevance> out;
  std::vector<double> q(T * dK), k(T * dK), v(T * dV), g(T * dV), h(dV);
  // Position ROPE: θ_p, or YaRN's θ'_p at inference (options.yarn_factor ≠ 1; the
  // frequencies only, no temperature: docs/ablations.md), from the one definition.
  std::vector<double> rope_freq(dK / 2);
  kernels::cpu::RopeFrequencies(dK, {options.yarn_factor, double(options.train_len)}, rope_freq.data());
  for (int64_t l = 0; l < d.n_layers; ++l) {
    const auto scalars = MapTileScalars(layout, params, l, &options);
    const auto& entries = layout.entries();
    auto slot = [&](LayerTensor t) { return params + entries[layout.MultiscreenEntry(l, t)].buffer_offset; };
    const int parts = d.output_gate ? 4 : 3;  // no W_G with the output gate off (issue 30)
    std::fill(delta.begin(), delta.end(), 0.0);
    for (int64_t t = 0; t < d.n_heads; ++t) {
      const float* W[4] = {slot(kWQ) + t * dE * dK, slot(kWK) + t * dE * dK, slot(kWV) + t * dE * dV,
                           d.output_gate ? slot(kWG) + t * dE * dV : nullptr};
      double* P[4] = {q.data(), k.data(), v.data(), g.data()};
      const int64_t width[4] = {dK, dK, dV, dV};
      // Step 3: projections.
      for (int part = 0; part < parts; ++part) {
        for (int64_t i = 0; i < T; ++i) {
          for (int64_t c = 0; c < width[part]; ++c) {
            double s = 0;
            for (int64_t e = 0; e < dE; ++e) s += x[i * dE + e] * W[part][e * width[part] + c];
            P[part][i * width[part] + c] = s;
          }
        }
      }
      const kernels::TileScalars& sc = scalars[t];
      // Steps 5–6: unit q, k, v; MiPE on coordinates 0 and 1 of q̄, k̄ (with the learned w).
      const double gamma = sc.mipe_w < d.w_th ? 0.5 * (std::cos(kPi * sc.mipe_w / d.w_th) + 1) : 0.0;
      for (int64_t i = 0; i < T; ++i) {
        Normalize(&q[i * dK], dK);
        Normalize(&k[i * dK], dK);
        Normalize(&v[i * dV], dV);
        // The position switch (issue 30): MiPE, none, or RoPE on the pairs (p, p + d_K/2).
        const double phi = kPi * double(i) * gamma / sc.mipe_w;
        for (double* z : {&q[i * dK], &k[i * dK]}) {
          if (d.position == kernels::PositionKind::kMipe) {
            const double z0 = z[0], z1 = z[1];
            z[0] = z0 * std::cos(phi) - z1 * std::sin(phi);
            z[1] = z0 * std::sin(phi) + z1 * std::cos(phi);
          } else if (d.position == kernels::PositionKind::kRope) {
            for (int64_t p = 0; p < dK / 2; ++p) {
              const double a = z[p], b = z[p + dK / 2];
              const double angle = double(i) * rope_freq[p];
              z[p] = a * std::cos(angle) - b * std::sin(angle);
              z[p + dK / 2] = a * std::sin(angle) + b * std::cos(angle);
            }
          }
        }
      }
      TileRelevance rel;
      rel.layer = l;
      rel.tile = t;
      rel.w = sc.mipe_w;
      rel.r = sc.r;
      rel.w_used = sc.w;
      const bool keep_pairs = l < static_cast<int64_t>(keep.size()) && t < static_cast<int64_t>(keep[l].size()) && keep[l][t];
      const float* W_O = slot(kWO) + t * dV * dE;
      for (int64_t i = 0; i < T; ++i) {
        std::fill(h.begin(), h.end(), 0.0);
        for (int64_t j = i; j >= 0; --j) {
          const double dist = double(j - i);  // ≤ 0
          if (!std::isinf(sc.w) && -dist >= sc.w) break;
          // Steps 7–9: similarity, Trim, Softmask.
          double s = 0;
          for (int64_t c = 0; c < dK; ++c) s += q[i * dK + c] * k[j * dK + c];
          const double a = std::max(1.0 - (1.0 - s) / sc.r, 0.0);
          const double alpha = a * a;
          const double m = std::isinf(sc.w) ? 1.0 : 0.5 * (std::cos(kPi * dist / sc.w) + 1);
          if (m <= 0) continue;
          ++rel.window_pairs;
          if (alpha <= 0) continue;
          ++rel.nonzero_pairs;
          if (keep_pairs) rel.pairs.push_back({int32_t(i), int32_t(j), float(alpha), float(m)});
          for (int64_t c = 0; c < dV; ++c) h[c] += alpha * m * v[j * dV + c];  // step 10
        }
        // Steps 11–13: TanhNorm, gate, output.
        double n = 0;
        for (double z : h) n += z * z;
        n = std::sqrt(n);
        const double f = !d.tanh_norm ? 1.0 : n < 1e-4 ? 1 - n * n / 3 : std::tanh(n) / n;
        for (int64_t c = 0; c < dV; ++c) {
          const double gi = g[i * dV + c];
          const double gate = d.output_gate ? std::tanh(gi / (1 + std::exp(-gi))) : 1.0;
          const double u = h[c] * f * gate * sc.scale;
          for (int64_t e = 0; e < dE; ++e) delta[i * dE + e] += u * W_O[c * dE + e];
        }
      }
      out.push_back(std::move(rel));
    }
    for (int64_t n = 0; n < T * dE; ++n) x[n] += delta[n];  // step 2: every tile read x^{ℓ−1}
  }
  if (logits != nullptr) {  // step 14: PLNorm and the tied head
    const double s_f = std::exp(double(*at("head/s_F")));
    logits->assign(T * V, 0.0);
    for (int64_t i = 0; i < T; ++i) {
      if (d.pl_norm) Normalize(&x[i * dE], dE);
      for (int64_t vv = 0; vv < V; ++vv) {
        double s = 0;
        for (int64_t c = 0; c < dE; ++c) s += x[i * dE + c] * e_bar[vv * dE + c];
        (*logits)[i * V + vv] = s_f * s;
      }
    }
  }
  return out;
}

}  // namespace multiscreen::eval
