#include "parallel/step.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "parallel/shard_split.h"

namespace multiscreen {

absl::StatusOr<std::unique_ptr<ParallelModel>> ParallelModel::Create(ProcessGrid& grid, const ModelDims& dims,
                                                                     ModelOptions model_options,
                                                                     DataParallelOptions dp_options) {
  auto shard = ShardForCoord(dims, grid.shape(), grid.coord());
  if (!shard.ok()) return shard.status();
  const Device device = model_options.device;
  for (auto [name, group] : {std::pair<const char*, Communicator*>{"tp", &grid.tp()}, {"pp", &grid.pp()},
                             {"dp", &grid.dp()}, {"embedding", grid.embed()}}) {
    if (group != nullptr && group->device() != device) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the ", name, " group moves ", DeviceName(group->device()), " buffers but the step runs on ",
          DeviceName(device), " (ProcessGrid::UseStepDevice was not called for it)"));
    }
  }
  std::unique_ptr<ParallelModel> m(new ParallelModel());
  auto ops = MakeKernelTable<float>(device);
  if (!ops.ok()) return ops.status();
  m->ops_ = std::move(*ops);
  m->shard_ = *shard;
  m->stage_ = std::make_unique<PipelineStage>(dims, *shard, model_options, &grid.tp(), &grid.pp());
  if (dp_options.overlap && grid.shape().dp > 1) {
    auto background = grid.DuplicateDp();
    if (!background.ok()) return background.status();
    m->dp_background_ = std::move(*background);
  }
  m->dp_ = std::make_unique<DataParallel>(&grid.dp(), m->stage_->layout().size(), dp_options, m->ops_.get(),
                                          m->dp_background_.get());
  return m;
}

namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// s_E, s_F and the Transformer's RMSNorm gains are replicated over tp and computed
// from replicated values; broadcasting tp rank 0's keeps the replicas bit-identical
// step after step. Those of them in grads[begin, end).
void BroadcastReplicated(ProcessGrid& grid, const ParamLayout& layout, float* grads, int64_t begin, int64_t end) {
  if (grid.shape().tp == 1) return;
  for (const ParamEntry& e : layout.entries()) {
    if (ReplicatedOverTp(e.kind) && e.buffer_offset >= begin && e.buffer_offset < end) {
      grid.tp().Broadcast(grads + e.buffer_offset, e.size(), 0);
    }
  }
}

// The last stage's Σ_m loss_m to every stage, then the mean over micro-batches and dp.
double MeanOverReplicas(ProcessGrid& grid, double loss_sum, const StepShape& shape) {
  double loss = loss_sum / static_cast<double>(shape.micro_batches);
  grid.pp().AllReduce(&loss, 1, ReduceOp::kSum);
  grid.dp().AllReduce(&loss, 1, ReduceOp::kSum);
  return loss / static_cast<double>(grid.shape().dp);
}

}  // namespace

absl::StatusOr<double> ComputeGradients(ProcessGrid& grid, ParallelModel& model, const float* params,
                                        const int32_t* tokens, const StepShape& shape, float* grads,
                                        double loss_scale) {
  const ParamLayout& layout = model.layout();
  // No fill here: the stage readies grads itself (ModelStage::ZeroGradientsBeforeStep).
  // Each micro-batch's loss is a mean over its B·T positions; 1/(M·dp) weighs it as
  // one of the global batch's M·dp micro-batches, and DataParallel's sum over dp adds
  // the replicas. Weighing before the backward (not dividing by dp after the
  // reduction) makes every rank's backward carry each micro-batch's gradients at the
  // magnitude one process running all M·dp of them would: fp16's backward operands
  // overflow (and the step is skipped) for the same loss scale whatever the layout.
  // tp and pp pass grad_scale through unchanged (each stage and each tp shard computes
  // its part of the same micro-batch's backward). For dp a power of two the weights
  // differ from 1/M by an exact power of two: in fp32 and bf16 the same bits as 1/M then
  // 1/dp after the reduction (barring subnormals); fp16 rounds as one process does.
  const int64_t global_micro_batches = std::max<int64_t>(1, shape.micro_batches) * grid.shape().dp;
  const double grad_scale = loss_scale / static_cast<double>(global_micro_batches);
  DataParallel& dp = model.data_parallel();
  dp.BeginReduce(grads);
  // Overlapped: each layer the last backward finishes is tp-synchronized (its
  // replicated gains) and handed to the reducer at once; the rest after Run.
  int64_t pending_end = layout.size();  // grads[pending_end, size) went to the reducer
  if (dp.overlapped()) {
    model.stage().set_gradients_final_from([&](int64_t offset) {
      BroadcastReplicated(grid, layout, grads, offset, pending_end);
      pending_end = offset;
      dp.GradientsFinalFrom(offset);
    });
  }
  auto loss_sum = model.stage().Run(params, tokens, shape.micro_batches, shape.micro_batch, shape.seq_len, grads,
                                    grad_scale);
  model.stage().set_gradients_final_from(nullptr);
  if (!loss_sum.ok()) return loss_sum.status();

  const auto compute_done = std::chrono::steady_clock::now();
  // Tied embedding: the first stage's W_E gradient (embedding) plus the last's (head).
  if (Communicator* embed = grid.embed()) {
    const ParamEntry* w_e = layout.Find("embed/W_E");
    embed->AllReduce(grads + w_e->buffer_offset, w_e->size(), ReduceOp::kSum);
  }
  BroadcastReplicated(grid, layout, grads, 0, pending_end);
  StepCommTimes& times = model.mutable_comm_times();
  times.dp_wait_s = dp.FinishReduce();
  const double loss = MeanOverReplicas(grid, *loss_sum, shape);
  times.after_backward_s = SecondsSince(compute_done) - times.dp_wait_s;
  return loss;
}

absl::StatusOr<double> EvaluateLoss(ProcessGrid& grid, ParallelModel& model, const float* params,
                                    const int32_t* tokens, const StepShape& shape) {
  auto loss_sum =
      model.stage().Run(params, tokens, shape.micro_batches, shape.micro_batch, shape.seq_len, nullptr, 0.0);
  if (!loss_sum.ok()) return loss_sum.status();
  return MeanOverReplicas(grid, *loss_sum, shape);
}

double GlobalGradNorm(ProcessGrid& grid, ParallelModel& model, const float* grads) {
  const ParamLayout& layout = model.layout();
  const auto [begin, end] = model.data_parallel().OwnedRange();
  // The counted ranges, merged where one ends where the next begins (all of them on a
  // single process): one SumSquares, one reduction on a device or one threaded pass on the
  // CPU, per run.
  double sum = 0;
  int64_t run_begin = 0, run_end = 0;
  for (const ParamEntry& e : layout.entries()) {
    // Count replicas once: W_E on the first stage only, s_E, s_F and gains on tp rank 0 only.
    if (e.kind == ParamKind::kW_E && !grid.first_stage()) continue;
    if (ReplicatedOverTp(e.kind) && grid.coord().tp != 0) continue;
    const int64_t b = std::max(begin, e.buffer_offset), f = std::min(end, e.buffer_offset + e.size());
    if (f <= b) continue;
    if (b != run_end) {
      if (run_end > run_begin) sum = model.ops().SumSquares(grads + run_begin, run_end - run_begin, sum);
      run_begin = b;
    }
    run_end = f;
  }
  if (run_end > run_begin) sum = model.ops().SumSquares(grads + run_begin, run_end - run_begin, sum);
  grid.world().AllReduce(&sum, 1, ReduceOp::kSum);
  return std::sqrt(sum);
}

}  // namespace multiscreen
