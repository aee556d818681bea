// The gradient computation of one optimizer step under 3D parallelism (DESIGN
// "Data flow of one training step", "Layout"): the trainer's entry point.
// On every rank: the 1F1B pipeline over this dp rank's micro-batches
// (tensor parallelism inside each stage), the tied W_E gradient summed between
// the first and last stage, and the data-parallel mean. The result is the
// gradient of the global-batch mean loss, so that (tp, pp, dp) = (1, 1, 1) is
// the single-process model and every layout agrees with it.
// The optimizer, the data loader and metrics are the trainer's.
//
// params and grads are arrays on the step's device (ModelOptions::device; the
// trainer keeps them there between steps, DESIGN "Devices"), and the grid's tp, pp,
// dp and embedding groups must move that device's buffers (ProcessGrid::UseStepDevice).
// Losses and norms come back as host doubles.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "common/config.h"
#include "model/multiscreen.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline.h"
#include "parallel/process_grid.h"

namespace multiscreen {

struct StepShape {
  int64_t micro_batches = 1;  // M (--grad_accum): micro-batches per dp rank per step
  int64_t micro_batch = 1;    // B (--micro_batch): sequences per micro-batch
  int64_t seq_len = 1;        // T (--seq_len): tokens per sequence
};

// Where one ComputeGradients call waited for communication once its compute was
// done, on this rank (seconds of wall time): what overlap did not hide.
struct StepCommTimes {
  double dp_wait_s = 0;        // waiting for the dp reduction (all of it without --dp_overlap)
  double after_backward_s = 0;  // the tied W_E all-reduce, the tp broadcasts left, the loss reductions
  double exposed_s() const { return dp_wait_s + after_backward_s; }
};

// This rank's part of the model: its shard, pipeline stage and data-parallel
// reducer, built from the grid, and the kernel table of the step's device for the
// step-level ops (zeroing, unscaling, the norm, the optimizer: ops()).
class ParallelModel {
 public:
  // With dp_options.overlap and dp > 1, the reducer gets a communication thread and a
  // dp communicator of its own (ProcessGrid::DuplicateDp; a collective over dp).
  // Errors: the grid does not fit the model (ShardForCoord: --tp above N_H, --pp above
  // N_L); a group of the grid that moves another device's buffers than
  // model_options.device (UseStepDevice not called); the device's kernel table;
  // --dp_overlap=on where MPI lacks MPI_THREAD_MULTIPLE.
  static absl::StatusOr<std::unique_ptr<ParallelModel>> Create(ProcessGrid& grid, const ModelDims& dims,
                                                               ModelOptions model_options = {},
                                                               DataParallelOptions dp_options = {});
  const ShardSpec& shard() const { return shard_; }
  // The layout of params and grads on this rank (logical names, slices, offsets).
  const ParamLayout& layout() const { return stage_->layout(); }
  PipelineStage& stage() { return *stage_; }
  DataParallel& data_parallel() { return *dp_; }
  // The step device's kernel table (params and grads live on its device()).
  kernels::KernelTable<float>& ops() { return *ops_; }
  Device device() const { return ops_->device(); }
  // The last ComputeGradients call's waits (ComputeGradients writes them).
  const StepCommTimes& comm_times() const { return comm_times_; }
  StepCommTimes& mutable_comm_times() { return comm_times_; }

 private:
  ParallelModel() = default;
  std::unique_ptr<kernels::KernelTable<float>> ops_;
  ShardSpec shard_;
  StepCommTimes comm_times_;
  std::unique_ptr<Communicator> dp_background_;  // the reducer's thread's dp communicator
  std::unique_ptr<PipelineStage> stage_;
  std::unique_ptr<DataParallel> dp_;
};

// One step's gradients. Every rank calls it with the same shape.
//   params [layout().size()] (device): this rank's shard (W_E rows replicated on the
//     first and last stage; s_E, s_F replicated over tp).
//   tokens [M][B, T+1] int32 (host): this dp rank's micro-batches (every pp and tp rank
//     of the replica passes the same); the global batch is dp·M·B sequences,
//     dp rank d holding global micro-batches [d·M, (d+1)·M).
//   grads [layout().size()] (device), written (not accumulated): ∂/∂params of
//     loss_scale × the mean loss over all dp·M·B·T positions (loss_scale: the
//     fp16 loss scale, 1 otherwise; the caller unscales). Under ZeRO-1 only
//     model.data_parallel().OwnedRange() holds it afterwards.
// With the reducer overlapped (DataParallelOptions::overlap), each dp bucket is
// reduced as soon as the last micro-batch's backward has finished its layers, while
// the backward goes on; the gradients are the same bits either way. The waits go to
// model.comm_times().
// Returns that global mean loss (nats per token, unscaled), identical on every rank.
// Errors: shape fields below 1, naming the flag (--grad_accum, --micro_batch, --seq_len).
absl::StatusOr<double> ComputeGradients(ProcessGrid& grid, ParallelModel& model, const float* params,
                                        const int32_t* tokens, const StepShape& shape, float* grads,
                                        double loss_scale = 1.0);

// The global mean loss of one batch without gradients (validation): the
// forwards only through the pipeline, no backward and no gradient traffic.
// Same arguments and result as ComputeGradients, which it equals to rounding
// (the loss-only head takes each row's max as the softmax shift;
// tests/parallel/parallel_step_test.cc). Every rank calls it.
absl::StatusOr<double> EvaluateLoss(ProcessGrid& grid, ParallelModel& model, const float* params,
                                    const int32_t* tokens, const StepShape& shape);

// ‖grads‖₂ over the whole model, each logical parameter counted once
// (replicated W_E, s_E, s_F included once), after ComputeGradients, plain or
// ZeRO-1; identical on every rank. grads on the step's device. A collective over the
// world. On the CPU the squares are summed in the order of the flat buffer.
double GlobalGradNorm(ProcessGrid& grid, ParallelModel& model, const float* grads);

}  // namespace multiscreen
