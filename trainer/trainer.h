// The training loop (issues 5–7): micro-batches with gradient accumulation,
// AdamW on fp32 masters, lr schedule, mixed precision with loss scaling,
// validation, metrics (metrics.jsonl, TensorBoard, console), checkpoints, and
// clean stops on signals — on one process or on every rank of a dp × pp × tp
// grid (parallel/step.h computes the gradients; this file owns the optimizer,
// the data order and what is written). World rank 0 writes metrics.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"
#include "common/config.h"
#include "common/file_lock.h"
#include "configs/config.pb.h"
#include "model/multiscreen.h"
#include "nlohmann/json.hpp"
#include "parallel/process_grid.h"
#include "parallel/step.h"
#include "trainer/adamw.h"
#include "trainer/loss_scaler.h"
#include "trainer/mfu_peak.h"
#include "trainer/tensorboard_writer.h"
#include "trainer/validation_data.h"
#include "data/loader.h"
#include "kernels/device_array.h"
#include "kernels/kernel_table.h"

namespace multiscreen {

// Everything a checkpoint must hold to continue a run exactly.
struct TrainState {
  int64_t step = 0;     // optimizer steps done
  int64_t samples = 0;  // global samples consumed (the loader's only state)
  int64_t tokens = 0;   // training tokens consumed
  int64_t nonfinite_in_a_row = 0;
  DeviceArray<float> params;  // fp32 masters, this rank's flat layout, on the step's device
  LossScalerState scaler;
};

// Whether `status` is an error that every rank of the job returned alike (the
// ranks agreed on it: a refusal to start, a failed checkpoint save): the
// caller reports it once, from world rank 0, and every rank exits normally
// instead of aborting the job.
bool IsAgreedError(const absl::Status& status);
// `status` marked as one that every rank returned alike (reported once, by rank 0).
absl::Status MarkAgreed(absl::Status status);

// How a trainer starts on a run_dir that holds checkpoints.
struct StartOptions {
  // When run_dir has checkpoints and none verifies, move them all to
  // checkpoints/unverified/ and train from step 0; without it such a start is
  // refused (with each checkpoint's problem), changing nothing.
  bool restart = false;
  // Where the step computes and its state lives: the model's kernel table, the
  // parameters, gradients and AdamW's moments (host copies only at checkpoint save and
  // resume/init; checkpoints unchanged, so a run resumes on another device). The grid's
  // groups must move this device's buffers (ProcessGrid::UseStepDevice).
  Device device = Device::kCpu;
  // Resume from a checkpoint whose training data (CheckpointMeta::data: token counts and
  // fingerprints) differ from this run's; without it such a resume is refused, since
  // the samples counter would index other data (--allow_data_change).
  bool allow_data_change = false;
  // MFU's denominator per process, TFLOP/s (a datasheet's dense peak, e.g. 989 for an
  // H100 SXM in bf16; --peak_tflops). 0: measured at start, the BLAS's SGEMM rate on a
  // CPU, the device's GEMM rate in the run's precision on a GPU (trainer/flops.h); either is
  // raised where a step achieves more (trainer/mfu_peak.h).
  double peak_tflops = 0;
};

class Trainer {
 public:
  struct Sources {
    std::shared_ptr<const TokenStream> train;  // training shards (windows by data/loader.h)
    std::shared_ptr<const TokenStream> val;    // held-out shard; may be null: no validation
    // A weighted mixture of named training sources (data/mixture.h), used instead of
    // `train` when not empty: metrics rows then carry tokens/<name> per source.
    std::vector<LoaderSource> mixture;
    // Named held-out sources, used instead of `val` when not empty: validation rows
    // carry val_loss/<name> for each and val_loss, their mean weighted by `weight`.
    std::vector<LoaderSource> val_sources;
  };
  // `run` has defaults applied and is validated against `dims`; `grid` is
  // this process's place in the layout (ProcessGrid::Single() for one
  // process) and outlives the trainer. Every rank calls every method.
  // Resumes from run_dir's newest checkpoint that verifies; newer ones (which
  // did not verify) are moved to checkpoints/unverified/, and the rows of
  // metrics.jsonl of steps after it are marked superseded (an appended
  // {"resumed_from": S, "superseded_rows": N} row; the file is only appended to).
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const config::RunConfig& run, const ModelDims& dims,
                                                         Sources sources, ProcessGrid* grid,
                                                         StartOptions start = {});

  ~Trainer();

  // Trains from state().step to run.steps(), or until a stop signal (then
  // returns OK after the current step). A non-finite loss or gradient norm in
  // fp32/bf16 (no loss scaling to back off) ends the run at once, Aborted,
  // naming the step, without a checkpoint: the last one saved stays the
  // newest; under fp16 such steps are skipped, max_nonfinite_steps in a row
  // at most. Writes metrics under run_dir, and a
  // checkpoint every checkpoint.every steps, at the end, and on a stop signal.
  // Ends by writing <run_dir>/status.json: {"state": "finished" | "stopped",
  // "step": N, "steps": total}; launch scripts requeue a stopped run.
  absl::Status Run();

  // Saves a checkpoint of the current state (checkpoint/checkpoint.h): each
  // model-parallel rank of dp replica 0 writes its shard, world rank 0 the
  // manifest. A collective; a failure on any rank (named with its cause:
  // "No space left on device", the bytes needed and free) is returned on every
  // rank, agreed (IsAgreedError), after the partial checkpoint is removed.
  // Parameters holding NaN or ±inf are not saved (Aborted, naming the step and
  // the tensor): the previous checkpoint stays the newest.
  absl::Status SaveCheckpointNow();

  // Mean validation loss over the first eval.windows held-out windows (or eval.batches ×
  // micro_batch of them, rounded down to a multiple of dp), each replica a block of
  // them in micro-batches (data/loader.h ValidationLoader); with
  // several held-out sources, each one's (last_val_losses()) and their weighted mean.
  // A collective. Cancelled when a stop signal reached any rank (checked before
  // each batch, so a long pass never delays a preemption's checkpoint).
  absl::StatusOr<double> Validate();

  // Whether the run validates after `step`: every eval.every steps and at its last step.
  bool IsValidationStep(int64_t step) const;

  TrainState& state() { return state_; }
  AdamW& optimizer() { return *optimizer_; }
  const ParamLayout& layout() const { return model_->layout(); }
  double last_loss() const { return last_loss_; }
  double last_val_loss() const { return last_val_loss_; }
  int64_t last_val_step() const { return last_val_step_; }  // the step last_val_loss() was taken at
  // (name, loss) of each held-out source at the last validation (Sources::val_sources).
  const std::vector<std::pair<std::string, double>>& last_val_losses() const { return last_val_losses_; }
  bool stopped_by_signal() const { return stopped_by_signal_; }
  bool resumed() const { return resumed_; }
  int64_t steps_run() const { return run_steps_; }  // optimizer steps taken by Run() in this process
  // What the step computes in here: run.precision(), except bf16 on a CPU path without bf16
  // dot products, which runs the fp32 step (trainer/cpu_precision.h). run.json records it at
  // the start beside the requested one ("effective_precision"); a resume that computes in
  // another one says so.
  Precision step_precision() const { return step_precision_; }

 private:
  Trainer(const config::RunConfig& run, const ModelDims& dims, ProcessGrid* grid);
  bool is_logger() const { return grid_->world_rank() == 0; }
  // The flat range this rank's optimizer updates: OwnedRange() under ZeRO-1, else all.
  std::pair<int64_t, int64_t> OptimizerRange();
  // One optimizer step; returns the mean training loss of the global batch.
  absl::StatusOr<double> Step(double lr, double* grad_norm, bool* applied);
  absl::Status LogStep(double loss, double lr, double grad_norm, bool applied, double seconds);
  absl::Status AppendMetrics(const std::string& json_line);
  // Validate at state().step, then (rank 0) its metrics row, TensorBoard scalars and
  // console line. True when done (or there is no validation data), false when a stop
  // signal cancelled it (on every rank alike). A collective.
  absl::StatusOr<bool> ValidateAndLog();
  absl::Status WriteRunStatus();
  // Continues from run_dir's newest checkpoint that verifies, if any (rank 0
  // chooses with ChooseStart, the others follow). A collective.
  absl::Status ResumeIfPresent(bool restart);
  // Rank 0: the checkpoint to resume from; NotFound to start from step 0 (after
  // StartFresh); any other error refuses the start (checkpoints that all fail
  // to verify, without `restart`).
  absl::StatusOr<CheckpointRef> ChooseStart(bool restart);
  // Without a checkpoint to resume from: a run_dir holding metrics of this same
  // run (run.json: model, seed, T, global batch) restarts from step 0, its rows
  // marked superseded (logging why_restart); one holding another run's metrics
  // is refused (CheckSameRun).
  absl::Status StartFresh(const absl::Status& why_no_checkpoint, const std::string& why_restart);
  absl::Status CheckSameRun(const absl::Status& why_no_checkpoint) const;
  // Appends {"resumed_from": step, "superseded_rows": N} to metrics.jsonl when N
  // of its standing rows are of steps after `step` (and ends a row cut short).
  absl::Status MarkSupersededMetrics(int64_t step);
  std::string MetricsPath() const;
  nlohmann::json RunIdentity() const;
  // Held-out windows per validation pass, by source ("val" for the unnamed one): what
  // run.json records at the start and a resume compares (null without validation).
  nlohmann::json ValidationWindows() const;
  // Rank 0, on resume: OK when the checkpoint's training data (`saved`, null for a
  // checkpoint without the record) are this run's data_ (or allow_data_change_, with a
  // warning); else an error naming the first source that differs.
  absl::Status CheckSameData(const std::string& checkpoint, const nlohmann::json& saved) const;

  config::RunConfig run_;
  ModelDims dims_;
  std::unique_ptr<TrainLoader> loader_;
  // One per held-out source (one, unnamed, for Sources::val), with its name and weight.
  std::vector<ValidationSource> val_loaders_;
  bool named_val_ = false;     // val_loss/<name> rows
  bool named_train_ = false;   // tokens/<name> rows
  std::vector<std::pair<std::string, double>> last_val_losses_;
  ProcessGrid* grid_;
  std::unique_ptr<ParallelModel> model_;
  std::unique_ptr<AdamW> optimizer_;
  DynamicLossScaler scaler_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  TrainState state_;
  DeviceArray<float> grads_;  // on the step's device
  double flops_per_token_ = 0, last_loss_ = 0, last_val_loss_ = 0;
  std::unique_ptr<MfuPeak> mfu_peak_;  // the MFU denominator, all processes' GFLOP/s
  int64_t last_val_step_ = 0;
  bool stopped_by_signal_ = false;
  bool resumed_ = false;
  // Resumed at a validation step whose validation a stop signal cancelled (no standing
  // val_loss row of it in metrics.jsonl): Run() validates before its first step.
  bool validation_owed_ = false;
  nlohmann::json data_;  // the training sources' identity, saved in every manifest (CheckpointMeta::data)
  bool allow_data_change_ = false;
  Precision step_precision_ = Precision::kFp32;
  std::unique_ptr<FileLock> lock_;  // <run_dir>/.lock, held by world rank 0
  double run_seconds_ = 0;
  double comm_exposed_s_ = 0;  // this rank's last step: communication waited for after compute (metrics)
  int64_t run_steps_ = 0;
};

}  // namespace multiscreen
