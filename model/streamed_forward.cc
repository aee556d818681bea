#include "model/streamed_forward.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/device_array.h"
#include "kernels/host_staging.h"

namespace multiscreen {

ShardSpec EmbedStage(const ModelDims& dims) {
  ShardSpec s = ShardSpec::Full(dims);
  s.layer_end = 0;
  s.head = false;
  return s;
}

ShardSpec LayerStage(const ModelDims& dims, int64_t layer) {
  ShardSpec s = ShardSpec::Full(dims);
  s.layer_begin = layer;
  s.layer_end = layer + 1;
  s.embed = false;
  s.head = false;
  return s;
}

ShardSpec HeadStage(const ModelDims& dims) {
  ShardSpec s = ShardSpec::Full(dims);
  s.layer_end = 0;
  s.embed = false;
  return s;
}

namespace {

// One stage of the streamed forward: built, loaded, BeginStep done; freed with it.
template <typename Real>
class LoadedStage {
 public:
  static absl::StatusOr<std::unique_ptr<LoadedStage>> Make(const ModelDims& dims, const ShardSpec& shard,
                                                           const ModelOptions& options, const StageLoader<Real>& load,
                                                           HostStaging<Real>& staging) {
    std::unique_ptr<LoadedStage> s(new LoadedStage);
    s->model = MakeModelStage<Real>(dims, shard, options);
    const ParamLayout& layout = s->model->layout();
    s->host.resize(layout.size());
    if (auto status = load(layout, s->host.data()); !status.ok()) return status;
    s->params = staging.In(s->host.data(), layout.size());
    s->model->BeginStep(s->params);
    return s;
  }
  std::unique_ptr<ModelStage<Real>> model;
  std::vector<Real> host;
  const Real* params = nullptr;  // host, or the staging's device copy
};

}  // namespace

template <typename Real>
absl::StatusOr<double> StreamedLoss(const ModelDims& dims, ModelOptions options, const StageLoader<Real>& load,
                                    const int32_t* tokens, int64_t B, int64_t T, Real* token_losses) {
  options.forward_only = true;
  auto staging = HostStaging<Real>::Create(options.device);
  if (!staging.ok()) return staging.status();
  std::vector<int32_t> inputs, targets;
  SplitWindows(tokens, B, T, &inputs, &targets);
  const int64_t rows = B * T;
  DeviceArray<Real> x(options.device);
  x.Resize(rows * dims.d_e);
  {
    auto stage = LoadedStage<Real>::Make(dims, EmbedStage(dims), options, load, *staging);
    if (!stage.ok()) return stage.status();
    (*stage)->model->Embed((*stage)->params, inputs.data(), rows, x.data());
  }
  for (int64_t l = 0; l < dims.n_layers; ++l) {
    auto stage = LoadedStage<Real>::Make(dims, LayerStage(dims, l), options, load, *staging);
    if (!stage.ok()) return stage.status();
    (*stage)->model->LayersForward((*stage)->params, B, T, x.data());
  }
  auto stage = LoadedStage<Real>::Make(dims, HeadStage(dims), options, load, *staging);
  if (!stage.ok()) return stage.status();
  return (*stage)->model->HeadLoss((*stage)->params, x.data(), targets.data(), rows, nullptr, nullptr, 1.0,
                                   token_losses);
}

int64_t StreamedLossBytes(const ModelDims& dims, int64_t B, int64_t T, int64_t real_bytes, int64_t head_chunk_rows) {
  const int64_t rows = B * T, dE = dims.d_e, V = dims.vocab, nt = dims.n_heads, dK = dims.d_k, dV = dims.d_v;
  const int64_t table = V * dE;                                          // W_E, Ē, the head's panels
  const int64_t layer = ParamLayout(dims, LayerStage(dims, 0)).size();   // loaded, then packed
  const int64_t activations = rows * (3 * dE + nt * (2 * dK + 2 * dV + 2 * dK + 3 * dV + 3));
  const int64_t head = 3 * table + std::min(rows, head_chunk_rows) * (V + 64) + 2 * rows * dE;
  const int64_t layers = 2 * layer + activations;
  return real_bytes * (std::max(head, layers) + rows * dE);
}

template absl::StatusOr<double> StreamedLoss<float>(const ModelDims&, ModelOptions, const StageLoader<float>&,
                                                    const int32_t*, int64_t, int64_t, float*);
template absl::StatusOr<double> StreamedLoss<double>(const ModelDims&, ModelOptions, const StageLoader<double>&,
                                                     const int32_t*, int64_t, int64_t, double*);

}  // namespace multiscreen
