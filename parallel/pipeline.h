// One pipeline stage of one model replica, running M micro-batches through the
// 1F1B schedule (parallel/pipeline_schedule.h; DESIGN "Data flow of one
// training step"): activations x and their gradients dx, [micro_batch·T, d_E]
// fp32, go to and from the neighbouring stages over the pp communicator.
// The stage's tensor parallelism lives inside the model (its tp all-reduces);
// the tied W_E gradient and data parallelism are the caller's (parallel/step.h).
//
// A model instance (ModelStage: Multiscreen or the Transformer, by dims.family) holds
// the activations of one micro-batch, so a stage keeps one instance per micro-batch in
// flight (slot m mod InFlightLimit).
//
// Parameters, gradients and activations are arrays on the stage's device
// (ModelOptions::device); the tp and pp communicators move buffers of that device
// (kernels/communicator.h), so nothing is copied to the host here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/device_array.h"
#include "model/model_stage.h"
#include "kernels/communicator.h"

namespace multiscreen {

class PipelineStage {
 public:
  // `shard` must embed iff this is the first stage and own the head iff it is
  // the last (ShardForCoord does so). `tp`: this stage's tensor-parallel group;
  // `pp`: the stages of this replica, with rank = stage (null: one stage).
  PipelineStage(const ModelDims& dims, const ShardSpec& shard, ModelOptions options, Communicator* tp,
                Communicator* pp);

  const ParamLayout& layout() const { return layout_; }
  int stage() const { return pp_->rank(); }
  int stages() const { return pp_->size(); }

  // Forward and backward of M = micro_batches micro-batches of B sequences of
  // T tokens: params (and grads) on the stage's device; tokens [M][B, T+1] host
  // memory (every stage of the replica passes the same;
  // the first reads the inputs, the last the targets). Writes grad_scale ×
  // ∂(Σ_m loss_m)/∂params into grads (the layout's flat buffer; W_E's slot
  // holds this stage's part only); what grads held is not read (NaNs included:
  // ModelStage::ZeroGradientsBeforeStep on the first backward's instance). Returns Σ_m loss_m, each the mean over B·T
  // positions, on the last stage, and 0 on the others. grads null: evaluation, the
  // forwards only (ForwardOnlySchedule, no activation gradients, one slot).
  // Errors: M, B or T below 1 (naming --grad_accum, --micro_batch, --seq_len), a
  // shard whose embed/head flags do not match the stage.
  absl::StatusOr<double> Run(const float* params, const int32_t* tokens, int64_t micro_batches, int64_t B,
                             int64_t T, float* grads, double grad_scale);

  // Overlap hook (parallel/data_parallel.h): while set, a Run with gradients on a CPU
  // stage calls it with offset o as soon as grads[o, layout().size()) holds its final
  // value for this Run: after each layer of the last micro-batch's backward (the
  // layers sit at the end of the layout, in order, and the backward ends with the
  // first). What lies before the first layer (W_E, s_E, s_F) is never reported: it is
  // final when Run returns. A device stage makes no calls (its gradients reach the
  // host at the end of Run). Empty: no calls.
  void set_gradients_final_from(std::function<void(int64_t offset)> hook) { final_from_ = std::move(hook); }

  // Model instances allocated so far (the most micro-batches ever in flight).
  int64_t instances() const { return static_cast<int64_t>(models_.size()); }

 private:
  ModelDims dims_;
  ShardSpec shard_;
  ModelOptions options_;
  ParamLayout layout_;
  SingleProcessCommunicator single_;
  Communicator* tp_;
  Communicator* pp_;
  std::vector<std::unique_ptr<ModelStage<float>>> models_;
  std::vector<DeviceArray<float>> x_, dx_;  // per slot: [B·T, d_E], on the models' device
  std::vector<int32_t> inputs_, targets_;   // [M][B·T]
  std::function<void(int64_t)> final_from_;
};

}  // namespace multiscreen
