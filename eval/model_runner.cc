#include "eval/model_runner.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

#include "model/decode.h"

namespace multiscreen::eval {

ModelRunner::ModelRunner(const Weights& weights, const InferenceOptions& options)
    : weights_(weights), options_(options), model_(weights.dims, ShardSpec::Full(weights.dims)) {}

void ModelRunner::TokenLossesFull(const int32_t* ids, int64_t n, float* losses) {
  const int64_t T = n - 1, dE = dims().d_e;
  const float* params = weights_.params.data();
  model_.BeginStep(params);
  x_.resize(T * dE);
  model_.Embed(params, ids, T, x_.data());
  model_.LayersForward(params, 1, T, x_.data(), &options_);
  targets_.assign(ids + 1, ids + n);
  model_.HeadLoss(params, x_.data(), targets_.data(), T, nullptr, nullptr, 1.0, losses);
}

void ModelRunner::TokenLossesDecode(const int32_t* ids, int64_t n, float* losses) {
  DecodeSession<float> session(dims(), weights_.params.data(), options_);
  std::vector<float> logits(dims().vocab);
  for (int64_t i = 0; i + 1 < n; ++i) {
    session.Step(ids[i], logits.data());
    const float m = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float z : logits) sum += std::exp(double(z) - m);
    losses[i] = static_cast<float>(double(m) + std::log(sum) - logits[ids[i + 1]]);
  }
}

std::vector<int32_t> ModelRunner::Greedy(const std::vector<int32_t>& prompt, int64_t max_new) {
  // As cli/generate_command.cc: feed the prompt, then each argmax in turn.
  DecodeSession<float> session(dims(), weights_.params.data(), options_);
  std::vector<float> logits(dims().vocab);
  for (int32_t id : prompt) session.Step(id, logits.data());
  std::vector<int32_t> out;
  for (int64_t i = 0; i < max_new; ++i) {
    const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    if (i + 1 < max_new) session.Step(next, logits.data());
  }
  return out;
}

int32_t ModelRunner::Prefill(const int32_t* ids, int64_t n) {
  const ModelDims& d = dims();
  const int64_t dE = d.d_e;
  const float* params = weights_.params.data();
  model_.BeginStep(params);
  x_.resize(n * dE);
  model_.Embed(params, ids, n, x_.data());
  model_.LayersForward(params, 1, n, x_.data(), &options_);
  // The last position's logits (spec step 14): z_v = e^{s_F} · (x/‖x‖) · W_E[v]/‖W_E[v]‖.
  const ParamLayout& layout = model_.layout();
  const float* x = x_.data() + (n - 1) * dE;
  const float* w_e = params + layout.Find("embed/W_E")->buffer_offset;
  double x_norm = 0;
  for (int64_t c = 0; c < dE; ++c) x_norm += double(x[c]) * x[c];
  x_norm = d.pl_norm ? std::max(std::sqrt(x_norm), 1e-12) : 1.0;
  const double scale = std::exp(double(params[layout.Find("head/s_F")->buffer_offset])) / x_norm;
  int32_t best = 0;
  double best_z = -INFINITY;
  for (int64_t v = 0; v < d.vocab; ++v) {
    const float* row = w_e + v * dE;
    double dot = 0, norm = 0;
    for (int64_t c = 0; c < dE; ++c) dot += double(x[c]) * row[c], norm += double(row[c]) * row[c];
    const double z = scale * dot / std::max(std::sqrt(norm), 1e-12);
    if (z > best_z) best_z = z, best = static_cast<int32_t>(v);
  }
  return best;
}

int64_t ModelRunner::FullPassBytes(int64_t n) const {
  const ModelDims& d = dims();
  const int64_t C = 2 * d.d_k + 2 * d.d_v;
  // Per layer: x_in, P, U, q̃, k̃, v̄, h and three norms (LayersForward keeps them all).
  const int64_t per_layer = d.d_e + d.n_heads * (C + 3 * d.d_v + 2 * d.d_k + 3);
  const int64_t floats = n * (d.n_layers * per_layer + 4 * d.d_e) + 2 * 512 * d.vocab + 2 * d.vocab * d.d_e;
  return floats * 4;
}

int64_t ModelRunner::DecodeBytes(int64_t n) const {
  const ModelDims& d = dims();
  const ParamLayout& layout = model_.layout();
  int64_t slots = 0;
  for (int64_t l = 0; l < d.n_layers; ++l) {
    for (const auto& t : MapTileScalars(layout, weights_.params.data(), l, &options_)) {
      slots += std::isinf(t.w) ? n : std::min<int64_t>(n, static_cast<int64_t>(std::ceil(t.w)));
    }
  }
  return slots * (d.d_k + d.d_v + 3) * 4 + (d.vocab * d.d_e + d.vocab) * 4;
}

int64_t AvailableMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

}  // namespace multiscreen::eval
