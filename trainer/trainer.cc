#include "trainer/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint.h"
#include "common/log.h"
#include "model/init.h"
#include "nlohmann/json.hpp"
#include "trainer/flops.h"
#include "trainer/lr_schedule.h"
#include "trainer/stop_signal.h"

namespace multiscreen {
namespace {

Precision ModelPrecision(config::RunConfig::Precision p) {
  switch (p) {
    case config::RunConfig::BF16: return Precision::kBf16;
    case config::RunConfig::FP16: return Precision::kFp16;
    default: return Precision::kFp32;
  }
}

std::string Eta(double seconds) {
  if (!(seconds >= 0) || std::isinf(seconds)) return "?";
  const int64_t s = static_cast<int64_t>(seconds);
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s / 60) % 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

}  // namespace

Trainer::Trainer(const config::RunConfig& run, const ModelDims& dims, Sources sources)
    : run_(run), dims_(dims), sources_(sources), scaler_(run.precision() == config::RunConfig::FP16, run.initial_loss_scale()) {}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const config::RunConfig& run, const ModelDims& dims,
                                                         Sources sources) {
  if (sources.train == nullptr) return absl::InvalidArgumentError("data: no training shards");
  std::unique_ptr<Trainer> t(new Trainer(run, dims, sources));
  ModelOptions options;
  options.precision = ModelPrecision(run.precision());
  t->model_ = std::make_unique<Multiscreen<float>>(dims, ShardSpec::Full(dims), options);
  const ParamLayout& layout = t->model_->layout();
  t->state_.params.resize(layout.size());
  InitParams(layout, static_cast<uint64_t>(run.seed()), t->state_.params.data());
  std::vector<uint8_t> decay(layout.size(), 1);
  if (!run.optimizer().decay_scalars()) {
    for (const ParamEntry& e : layout.entries()) {
      if (e.is_scalar()) std::fill(decay.begin() + e.buffer_offset, decay.begin() + e.buffer_offset + e.size(), 0);
    }
  }
  const auto& o = run.optimizer();
  t->optimizer_ = std::make_unique<AdamW>(layout.size(), AdamWHyper{o.beta1(), o.beta2(), o.eps(), o.weight_decay()},
                                          std::move(decay));
  t->grads_.resize(layout.size());
  // MFU: FLOPs at the initial windows (the learned windows move; this is the
  // spec's count at initialization) against the measured GEMM rate.
  std::vector<double> windows;
  for (const ParamEntry& e : layout.entries()) {
    if (e.kind != ParamKind::kS_w) continue;
    for (int64_t i = 0; i < e.size(); ++i) windows.push_back(std::exp(double(t->state_.params[e.buffer_offset + i])) + 1);
  }
  t->flops_per_token_ = TrainingFlopsPerToken(dims, run.seq_len(), windows);
  t->peak_gflops_ = MeasureSgemmGflops();
  std::error_code ec;
  std::filesystem::create_directories(run.run_dir(), ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat("--run_dir=", run.run_dir(), ": ", ec.message()));
  if (auto s = t->ResumeIfPresent(); !s.ok()) return s;
  // The loader starts where the checkpoint (if any) left off: its only state.
  LoaderOptions lo;
  lo.seq_len = run.seq_len();
  lo.global_batch = run.micro_batch() * run.grad_accum();
  lo.seed = static_cast<uint64_t>(run.seed());
  lo.start_sample = t->state_.samples;
  auto loader = TrainLoader::Create(sources.train, lo);
  if (!loader.ok()) return loader.status();
  t->loader_ = std::move(*loader);
  if (sources.val != nullptr && run.eval().every() > 0) {
    ValidationOptions vo;
    vo.seq_len = run.seq_len();
    vo.global_batch = run.micro_batch();
    vo.max_batches = run.eval().batches();
    auto val = ValidationLoader::Create(sources.val, vo);
    if (!val.ok()) return val.status();
    t->val_loader_ = std::move(*val);
  }
  if (run.logging().tensorboard()) {
    auto tb = TensorBoardWriter::Open(run.run_dir() + "/tb");
    if (!tb.ok()) return tb.status();
    t->tensorboard_ = std::move(*tb);
  }
  return t;
}

absl::Status Trainer::ResumeIfPresent() {
  const std::string metrics = run_.run_dir() + "/metrics.jsonl";
  const bool has_checkpoints = std::filesystem::exists(run_.run_dir() + "/checkpoints");
  if (!has_checkpoints) {
    if (std::filesystem::exists(metrics) && std::filesystem::file_size(metrics) > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--run_dir=", run_.run_dir(), " already holds a run (", metrics,
          ") but no checkpoint to resume from; choose a new --run_dir or remove the old one"));
    }
    return absl::OkStatus();
  }
  auto ckpt = FindLatestCheckpoint(run_.run_dir());
  if (!ckpt.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("--run_dir=", run_.run_dir(), ": cannot resume: ",
                                                      ckpt.status().message()));
  }
  const CheckpointMeta& m = ckpt->meta;
  if (m.seed != run_.seed()) {
    return absl::FailedPreconditionError(absl::StrCat(ckpt->dir, ": saved with seed ", m.seed, ", the run asks for ",
                                                      run_.seed(), " (the data order depends on it)"));
  }
  if (auto s = LoadShard(*ckpt, model_->layout(), state_.params.data(), optimizer_->m().data(), optimizer_->v().data());
      !s.ok()) {
    return s;
  }
  optimizer_->set_step(m.adam_step);
  state_.step = m.step;
  state_.samples = m.samples;
  state_.tokens = m.tokens;
  state_.nonfinite_in_a_row = m.nonfinite_in_a_row;
  state_.scaler = {m.loss_scale, m.loss_scale_good_steps, m.loss_scale_skipped};
  scaler_.set_state(state_.scaler);
  resumed_ = true;
  // Drop metrics of steps after the checkpoint: they are about to be redone.
  std::ifstream in(metrics);
  std::string kept, line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("step") && j["step"].get<int64_t>() <= m.step) kept += line + "\n";
  }
  in.close();
  std::ofstream(metrics, std::ios::trunc) << kept;
  LogInfo("resumed from ", ckpt->dir, " at step ", m.step, " (", m.samples, " samples consumed)");
  return absl::OkStatus();
}

absl::Status Trainer::SaveCheckpointNow() {
  CheckpointMeta m;
  m.step = state_.step;
  m.samples = state_.samples;
  m.tokens = state_.tokens;
  m.adam_step = optimizer_->step();
  m.seed = run_.seed();
  m.nonfinite_in_a_row = state_.nonfinite_in_a_row;
  m.loss_scale = scaler_.scale();  // 1 when loss scaling is off
  m.loss_scale_good_steps = state_.scaler.good_steps;
  m.loss_scale_skipped = state_.scaler.skipped;
  m.dims = dims_;
  ShardTensors shard{&model_->layout(), state_.params.data(), optimizer_->m().data(), optimizer_->v().data(), 0, 0};
  const auto start = std::chrono::steady_clock::now();
  auto dir = SaveCheckpoint(run_.run_dir(), m, {shard}, run_.checkpoint().keep_last(), run_.checkpoint().keep_every());
  if (!dir.ok()) return dir.status();
  LogInfo("saved ", *dir, " in ",
          absl::StrFormat("%.2fs", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
  return absl::OkStatus();
}

absl::Status Trainer::AppendMetrics(const std::string& line) {
  const std::string path = run_.run_dir() + "/metrics.jsonl";
  std::ofstream out(path, std::ios::app);
  out << line << "\n";
  out.flush();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

absl::StatusOr<double> Trainer::Step(double lr, double* grad_norm, bool* applied) {
  const int64_t B = run_.micro_batch(), T = run_.seq_len(), accum = run_.grad_accum();
  std::fill(grads_.begin(), grads_.end(), 0.f);
  const double scale = scaler_.scale();
  double loss = 0;
  const Batch batch = loader_->Next();  // accum micro-batches of B windows
  for (int64_t a = 0; a < accum; ++a) {
    loss += model_->ForwardBackward(state_.params.data(), batch.tokens.data() + a * B * (T + 1), B, T, grads_.data(),
                                    nullptr, scale / double(accum));
  }
  loss /= double(accum);
  // Unscale, and check that the step is finite.
  double sq = 0;
  const float inv = static_cast<float>(1.0 / scale);
  for (float& g : grads_) {
    g *= inv;
    sq += double(g) * g;
  }
  *grad_norm = std::sqrt(sq);
  const bool finite = std::isfinite(loss) && std::isfinite(sq);
  *applied = scaler_.Update(finite);
  state_.scaler = scaler_.state();
  if (*applied) {
    if (run_.optimizer().grad_clip() > 0 && *grad_norm > run_.optimizer().grad_clip()) {
      const float c = static_cast<float>(run_.optimizer().grad_clip() / *grad_norm);
      for (float& g : grads_) g *= c;
    }
    optimizer_->Step(state_.params.data(), grads_.data(), lr);
    state_.nonfinite_in_a_row = 0;
  } else {
    ++state_.nonfinite_in_a_row;
  }
  state_.samples += accum * B;
  state_.tokens += accum * B * T;
  ++state_.step;
  return loss;
}

absl::StatusOr<double> Trainer::Validate() {
  if (val_loader_ == nullptr) return absl::FailedPreconditionError("no validation data");
  const int64_t B = run_.micro_batch(), T = run_.seq_len();
  Multiscreen<float> eval_model(dims_, ShardSpec::Full(dims_));
  double loss = 0;
  for (int64_t b = 0; b < val_loader_->num_batches(); ++b) {
    loss += eval_model.Loss(state_.params.data(), val_loader_->Get(b).tokens.data(), B, T);
  }
  return loss / double(val_loader_->num_batches());
}

absl::Status Trainer::LogStep(double loss, double lr, double grad_norm, bool applied, double seconds) {
  const int64_t step_tokens = run_.grad_accum() * run_.micro_batch() * run_.seq_len();
  const double tokens_per_s = double(step_tokens) / seconds;
  const double mfu = tokens_per_s * flops_per_token_ / (peak_gflops_ * 1e9);
  nlohmann::json j = {{"step", state_.step},       {"loss", loss},
                      {"lr", lr},                  {"grad_norm", grad_norm},
                      {"tokens", state_.tokens},   {"tokens_per_s", tokens_per_s},
                      {"mfu", mfu},                {"loss_scale", scaler_.scale()},
                      {"skipped", !applied}};
  if (!std::isfinite(loss)) j["loss"] = nullptr;
  if (!std::isfinite(grad_norm)) j["grad_norm"] = nullptr;
  if (auto s = AppendMetrics(j.dump()); !s.ok()) return s;
  if (tensorboard_ != nullptr) {
    (void)tensorboard_->AddScalar("train/loss", loss, state_.step);
    (void)tensorboard_->AddScalar("train/lr", lr, state_.step);
    (void)tensorboard_->AddScalar("train/grad_norm", grad_norm, state_.step);
    (void)tensorboard_->AddScalar("train/tokens_per_s", tokens_per_s, state_.step);
    (void)tensorboard_->AddScalar("train/mfu", mfu, state_.step);
    if (auto s = tensorboard_->Flush(); !s.ok()) return s;
  }
  if (!applied) {
    LogWarning("step ", state_.step, ": non-finite loss or gradients, step skipped",
               scaler_.enabled() ? absl::StrCat(" (loss scale now ", scaler_.scale(), ")") : "");
  }
  if (state_.step % run_.logging().console_every() == 0 || state_.step == run_.steps()) {
    const double eta = run_seconds_ / double(std::max<int64_t>(1, run_steps_)) * double(run_.steps() - state_.step);
    std::fprintf(stderr, "step %lld/%lld | loss %.4f | lr %.3e | gnorm %.3f | %.0f tok/s | MFU %.1f%% | ETA %s\n",
                 (long long)state_.step, (long long)run_.steps(), loss, lr, grad_norm, tokens_per_s, 100 * mfu,
                 Eta(eta).c_str());
  }
  return absl::OkStatus();
}

absl::Status Trainer::Run() {
  InstallStopHandlers();
  while (state_.step < run_.steps()) {
    const double lr = LearningRate(run_.schedule(), run_.optimizer().lr(), state_.step, run_.steps());
    const auto start = std::chrono::steady_clock::now();
    double grad_norm = 0;
    bool applied = false;
    auto loss = Step(lr, &grad_norm, &applied);
    if (!loss.ok()) return loss.status();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    run_seconds_ += seconds;
    ++run_steps_;
    last_loss_ = *loss;
    if (auto s = LogStep(*loss, lr, grad_norm, applied, seconds); !s.ok()) return s;
    if (state_.nonfinite_in_a_row >= run_.max_nonfinite_steps()) {
      return absl::AbortedError(absl::StrCat("step ", state_.step, ": ", state_.nonfinite_in_a_row,
                                             " non-finite steps in a row (max_nonfinite_steps = ",
                                             run_.max_nonfinite_steps(), "); the run diverged"));
    }
    const bool eval_now = run_.eval().every() > 0 &&
                          (state_.step % run_.eval().every() == 0 || state_.step == run_.steps());
    if (eval_now && val_loader_ != nullptr) {
      auto val = Validate();
      if (!val.ok()) return val.status();
      last_val_loss_ = *val;
      if (auto s = AppendMetrics(nlohmann::json{{"step", state_.step}, {"val_loss", *val}}.dump()); !s.ok()) return s;
      if (tensorboard_ != nullptr) (void)tensorboard_->AddScalar("val/loss", *val, state_.step);
      std::fprintf(stderr, "step %lld/%lld | val_loss %.4f\n", (long long)state_.step, (long long)run_.steps(), *val);
    }
    const bool stop = StopRequested();
    const bool periodic = run_.checkpoint().every() > 0 && state_.step % run_.checkpoint().every() == 0;
    if (stop || periodic || state_.step == run_.steps()) {
      if (auto s = SaveCheckpointNow(); !s.ok()) return s;
    }
    if (stop) {
      stopped_by_signal_ = true;
      LogInfo("signal ", StopSignal(), ": stopped after step ", state_.step, " with a checkpoint saved");
      break;
    }
  }
  return absl::OkStatus();
}

}  // namespace multiscreen
