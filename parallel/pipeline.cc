#include "parallel/pipeline.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "parallel/pipeline_schedule.h"

namespace multiscreen {

PipelineStage::PipelineStage(const ModelDims& dims, const ShardSpec& shard, ModelOptions options, Communicator* tp,
                             Communicator* pp)
    : dims_(dims),
      shard_(shard),
      options_(options),
      layout_(dims, shard),
      single_(options.device),
      tp_(tp != nullptr ? tp : &single_),
      pp_(pp != nullptr ? pp : &single_) {}

absl::StatusOr<double> PipelineStage::Run(const float* params, const int32_t* tokens, int64_t micro_batches,
                                          int64_t B, int64_t T, float* grads, double grad_scale) {
  if (micro_batches < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--grad_accum=", micro_batches, ": need at least 1 micro-batch"));
  }
  if (B < 1) return absl::InvalidArgumentError(absl::StrCat("--micro_batch=", B, " must be at least 1"));
  if (T < 1) return absl::InvalidArgumentError(absl::StrCat("--seq_len=", T, " must be at least 1"));
  const int s = stage(), S = stages();
  if (shard_.embed != (s == 0) || shard_.head != (s == S - 1)) {
    return absl::FailedPreconditionError(absl::StrCat("pipeline stage ", s, " of ", S, ": shard has embed=",
                                                      shard_.embed, " head=", shard_.head,
                                                      "; the first stage must embed and the last own the head"));
  }
  const Device device = options_.device;
  const int64_t M = micro_batches, rows = B * T, dE = dims_.d_e, n = rows * dE;
  const bool train = grads != nullptr;
  const int64_t slots = train ? InFlightLimit(s, S, M) : 1;
  while (instances() < slots) {
    models_.push_back(MakeModelStage<float>(dims_, shard_, options_, tp_));
  }
  while (static_cast<int64_t>(x_.size()) < slots) {
    x_.emplace_back(device);
    dx_.emplace_back(device);
  }
  for (int64_t i = 0; i < slots; ++i) {
    x_[i].Resize(n);
    dx_[i].Resize(train ? n : 0);
  }
  // Inputs are the first T tokens of each sequence, targets the last T.
  inputs_.resize(M * rows);
  targets_.resize(M * rows);
  for (int64_t b = 0; b < M * B; ++b) {
    const int32_t* seq = tokens + b * (T + 1);
    std::copy(seq, seq + T, inputs_.begin() + b * T);
    std::copy(seq + 1, seq + T + 1, targets_.begin() + b * T);
  }
  for (int64_t i = 0; i < slots; ++i) models_[i]->BeginStep(params);
  const std::vector<PipeOp> schedule = train ? OneFOneBSchedule(s, S, M) : ForwardOnlySchedule(s, S, M);
  // The instance of the step's first backward readies the gradients (its first
  // LayersBackward and its EndStep may write them instead of adding: the EndSteps below
  // start with it). 1F1B runs the backwards in micro-batch order: micro-batch 0, slot 0.
  int64_t first_slot = 0;
  if (train) {
    auto first = std::find_if(schedule.begin(), schedule.end(),
                              [](const PipeOp& op) { return op.kind == PipeOpKind::kBackward; });
    if (first != schedule.end()) first_slot = first->micro_batch % slots;
    models_[first_slot]->ZeroGradientsBeforeStep(grads);
  }

  // One stage (one model instance): its losses stay summed where the head runs and are
  // read once, at the end (ModelStage::TakeLoss; the same sum, in the same order). With
  // several stages the last one reads each micro-batch's (its instances keep one sum each).
  const bool deferred_loss = S == 1;
  double loss_sum = 0;
  const int prev = s - 1, next = s + 1;
  for (const PipeOp& op : schedule) {
    const int64_t m = op.micro_batch, slot = m % slots, other = op.other >= 0 ? op.other % slots : -1;
    ModelStage<float>& model = *models_[slot];
    const int32_t* ids = inputs_.data() + m * rows;
    switch (op.kind) {
      case PipeOpKind::kRecvForward:
        pp_->Recv(x_[slot].data(), n, prev);
        break;
      case PipeOpKind::kForward:
        if (shard_.embed) model.Embed(params, ids, rows, x_[slot].data());
        model.LayersForward(params, B, T, x_[slot].data());
        if (shard_.head && deferred_loss) {
          model.HeadLossDeferred(params, x_[slot].data(), targets_.data() + m * rows, rows,
                                 train ? dx_[slot].data() : nullptr, grads, grad_scale);
        } else if (shard_.head) {
          loss_sum += model.HeadLoss(params, x_[slot].data(), targets_.data() + m * rows, rows,
                                     train ? dx_[slot].data() : nullptr, grads, grad_scale, nullptr);
        }
        break;
      case PipeOpKind::kSendForward:
        pp_->Send(x_[slot].data(), n, next);
        break;
      case PipeOpKind::kSendForwardRecvBackward:
        pp_->SendRecv(x_[slot].data(), n, next, dx_[other].data(), n, next);
        break;
      case PipeOpKind::kRecvBackward:
        pp_->Recv(dx_[slot].data(), n, next);
        break;
      case PipeOpKind::kBackward:
        // The last backward of the step (1F1B runs them in micro-batch order): each
        // layer it finishes is final.
        if (m == M - 1 && final_from_ && device == Device::kCpu) {
          model.set_layer_gradients_done([this](int64_t layer) {
            final_from_(layout_.entries()[layout_.LayerEntry(layer)].buffer_offset);
          });
        }
        model.LayersBackward(params, dx_[slot].data(), grads);
        model.set_layer_gradients_done(nullptr);
        if (shard_.embed) model.EmbedBackward(params, ids, rows, dx_[slot].data(), grads);
        break;
      case PipeOpKind::kSendBackward:
        pp_->Send(dx_[slot].data(), n, prev);
        break;
      case PipeOpKind::kSendBackwardRecvForward:
        pp_->SendRecv(dx_[slot].data(), n, prev, x_[other].data(), n, prev);
        break;
    }
  }
  // Each instance gathered the Ē gradient of its own micro-batches.
  if (train) {
    for (int64_t i = 0; i < slots; ++i) models_[(first_slot + i) % slots]->EndStep(grads);
  }
  if (shard_.head && deferred_loss) loss_sum = models_[0]->TakeLoss();
  return shard_.head ? loss_sum : 0.0;
}

}  // namespace multiscreen
