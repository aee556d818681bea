#include "model/model_stage.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "model/multiscreen.h"
#include "model/transformer.h"

namespace multiscreen {

void FatalModelError(const std::string& what) {
  std::fprintf(stderr, "multiscreen: fatal: %s\n", what.c_str());
  std::exit(1);
}

KernelOptions KernelOptionsOf(const ModelOptions& options) {
  KernelOptions k;
  k.head_path = options.head_path;
  k.head_chunk_rows = options.head_chunk_rows;
  k.head_vocab_block = options.head_vocab_block;
  k.precision = options.precision;  // the CUDA tables' screening and attention kernels follow it
  k.screening_kernel = options.screening_kernel;
  k.screening_u_operand = options.screening_u_operand;
  k.screening_gradient_operand = options.screening_gradient_operand;
  return k;
}

template <typename Real>
std::unique_ptr<kernels::KernelTable<Real>> KernelTableFor(const ModelOptions& options) {
  auto table = MakeKernelTable<Real>(options.device, KernelOptionsOf(options));
  if (!table.ok()) FatalModelError("--device=" + DeviceName(options.device) + ": " + std::string(table.status().message()));
  return std::move(*table);
}

void SplitWindows(const int32_t* tokens, int64_t B, int64_t T, std::vector<int32_t>* inputs,
                  std::vector<int32_t>* targets) {
  inputs->resize(B * T);
  targets->resize(B * T);
  for (int64_t b = 0; b < B; ++b) {
    std::copy(tokens + b * (T + 1), tokens + b * (T + 1) + T, inputs->begin() + b * T);
    std::copy(tokens + b * (T + 1) + 1, tokens + (b + 1) * (T + 1), targets->begin() + b * T);
  }
}

template <typename Real>
double ModelStage<Real>::ForwardBackward(const Real* params, const int32_t* tokens, int64_t B, int64_t T, Real* grads,
                                         Real* token_losses, double grad_scale) {
  const int64_t rows = B * T, dE = dims().d_e;
  SplitWindows(tokens, B, T);
  BeginStep(params);
  step_x_.Resize(rows * dE);
  step_dx_.Resize(rows * dE);
  Real *x = step_x_.data(), *dx = step_dx_.data();
  Embed(params, step_inputs_.data(), rows, x);
  LayersForward(params, B, T, x);
  const double loss = HeadLoss(params, x, step_targets_.data(), rows, dx, grads, grad_scale, token_losses);
  LayersBackward(params, dx, grads);
  EmbedBackward(params, step_inputs_.data(), rows, dx, grads);
  EndStep(grads);
  return loss;
}

template <typename Real>
double ModelStage<Real>::Loss(const Real* params, const int32_t* tokens, int64_t B, int64_t T, Real* token_losses) {
  const int64_t rows = B * T, dE = dims().d_e;
  SplitWindows(tokens, B, T);
  BeginStep(params);
  step_x_.Resize(rows * dE);
  Embed(params, step_inputs_.data(), rows, step_x_.data());
  LayersForward(params, B, T, step_x_.data());
  return HeadLoss(params, step_x_.data(), step_targets_.data(), rows, nullptr, nullptr, 1.0, token_losses);
}

template class ModelStage<float>;
template class ModelStage<double>;
template std::unique_ptr<kernels::KernelTable<float>> KernelTableFor<float>(const ModelOptions&);
template std::unique_ptr<kernels::KernelTable<double>> KernelTableFor<double>(const ModelOptions&);

template <typename Real>
std::unique_ptr<ModelStage<Real>> MakeModelStage(const ModelDims& dims, const ShardSpec& shard, ModelOptions options,
                                                 Communicator* tp) {
  if (dims.transformer()) return std::make_unique<Transformer<Real>>(dims, shard, options, tp);
  return std::make_unique<Multiscreen<Real>>(dims, shard, options, tp);
}

template std::unique_ptr<ModelStage<float>> MakeModelStage<float>(const ModelDims&, const ShardSpec&, ModelOptions,
                                                                   Communicator*);
template std::unique_ptr<ModelStage<double>> MakeModelStage<double>(const ModelDims&, const ShardSpec&, ModelOptions,
                                                                    Communicator*);

}  // namespace multiscreen
