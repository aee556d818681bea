#include "trainer/trainer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <functional>
#include <sstream>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/h5_file.h"
#include "common/build_info.h"
#include "common/file_lock.h"
#include "common/log.h"
#include "common/status.h"
#include "common/text_file.h"
#include "kernels/cpu/fma_peak.h"
#include "kernels/precision_name.h"
#include "model/init.h"
#include "nlohmann/json.hpp"
#include "parallel/progress.h"
#include "trainer/flops.h"
#include "trainer/cpu_precision.h"
#include "trainer/mfu_peak.h"
#include "trainer/lr_schedule.h"
#include "trainer/recipe_change.h"
#include "trainer/run_agreement.h"
#include "trainer/run_files.h"
#include "trainer/stop_signal.h"
#include "trainer/token_ids.h"

namespace multiscreen {
namespace {

Precision ModelPrecision(config::RunConfig::Precision p) {
  switch (p) {
    case config::RunConfig::BF16: return Precision::kBf16;
    case config::RunConfig::FP16: return Precision::kFp16;
    default: return Precision::kFp32;
  }
}

constexpr char kAgreedPayload[] = "multiscreen/agreed";

// Every rank passes its own status and gets back, on every rank, the error of
// the lowest-ranked rank that failed (OK when none did), marked as agreed. A
// collective: a failure seen by some ranks ends every rank alike, with its
// cause, instead of leaving the others waiting or aborting the job.
absl::Status AgreeOnStatus(Communicator& world, const absl::Status& mine) {
  return MarkAgreed(AgreeOnError(world, mine, /*name_rank=*/false));
}

// The rows of a metrics.jsonl text that stand (not superseded by a later
// {"resumed_from": S} row, not cut short), in order: each with an integer "step".
std::vector<nlohmann::json> StandingRows(const std::string& text) {
  std::vector<nlohmann::json> standing;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    auto row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!row.is_object()) continue;
    if (row.contains("resumed_from") && row["resumed_from"].is_number_integer()) {
      const int64_t from = row["resumed_from"].get<int64_t>();
      std::erase_if(standing, [from](const nlohmann::json& r) { return r["step"].get<int64_t>() > from; });
    } else if (row.contains("step") && row["step"].is_number_integer()) {
      standing.push_back(std::move(row));
    }
  }
  return standing;
}

// How many rows of a metrics.jsonl text stand with a step after `step`.
int64_t StandingRowsAfter(const std::string& text, int64_t step) {
  const std::vector<nlohmann::json> rows = StandingRows(text);
  return std::count_if(rows.begin(), rows.end(), [step](const nlohmann::json& r) { return r["step"].get<int64_t>() > step; });
}

// Whether a validation row (val_loss) of `step` stands in a metrics.jsonl text.
bool ValidationStandsAt(const std::string& text, int64_t step) {
  const std::vector<nlohmann::json> rows = StandingRows(text);
  return std::any_of(rows.begin(), rows.end(),
                     [step](const nlohmann::json& r) { return r["step"].get<int64_t>() == step && r.contains("val_loss"); });
}

// What the run will write, checked before any step is computed: a run directory whose
// `checkpoints` is a file, or read-only, or whose status.json or checkpoints/latest is a
// directory, would otherwise fail at its first save, after the compute was spent.
absl::Status CheckRunDirWritable(const std::string& run_dir) {
  namespace fs = std::filesystem;
  const fs::path root(run_dir), ckpts = root / "checkpoints";
  std::error_code ec;
  if (fs::exists(ckpts, ec) && !fs::is_directory(ckpts, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(ckpts.string(), ": exists and is not a directory"));
  }
  for (const fs::path& file : {root / "status.json", root / "metrics.jsonl", ckpts / "latest"}) {
    if (fs::is_directory(fs::symlink_status(file, ec))) {
      return absl::FailedPreconditionError(absl::StrCat(file.string(), ": is a directory (the run writes a file there)"));
    }
  }
  fs::create_directories(ckpts, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(ckpts.string(), ": cannot create: ", ec.message()));
  const std::string probe = (ckpts / ".write_probe").string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::PermissionDeniedError(absl::StrCat(ckpts.string(), ": cannot write: ", std::strerror(errno)));
  ::close(fd);
  ::unlink(probe.c_str());
  return absl::OkStatus();
}

std::string Eta(double seconds) {
  if (!(seconds >= 0) || std::isinf(seconds)) return "?";
  const int64_t s = static_cast<int64_t>(seconds);
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s / 60) % 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

}  // namespace

absl::Status MarkAgreed(absl::Status status) {
  if (!status.ok()) status.SetPayload(kAgreedPayload, absl::Cord("1"));
  return status;
}

bool IsAgreedError(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kAgreedPayload).has_value();
}

Trainer::Trainer(const config::RunConfig& run, const ModelDims& dims, ProcessGrid* grid)
    : run_(run), dims_(dims), grid_(grid),
      scaler_(run.precision() == config::RunConfig::FP16, run.initial_loss_scale()) {}

Trainer::~Trainer() = default;  // lock_ releases the run directory's lock

std::pair<int64_t, int64_t> Trainer::OptimizerRange() {
  if (model_->data_parallel().options().zero1) return model_->data_parallel().OwnedRange();
  return {0, model_->layout().size()};
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const config::RunConfig& run, const ModelDims& dims,
                                                         Sources sources, ProcessGrid* grid, StartOptions start) {
  if (sources.train == nullptr && sources.mixture.empty()) return absl::InvalidArgumentError("data: no training shards");
  std::unique_ptr<Trainer> t(new Trainer(run, dims, grid));
  // What the run trains on, recorded in each checkpoint and checked on resume.
  auto identify = [&](const std::string& name, const TokenStream& stream) {
    t->data_[name] = {{"tokens", stream.size()}, {"fingerprint", stream.Fingerprint()}};
  };
  if (sources.mixture.empty()) identify("train", *sources.train);
  for (const LoaderSource& source : sources.mixture) {  // a mixture's order depends on its weights too
    identify(source.name, *source.stream);
    t->data_[source.name]["weight"] = source.weight;
  }
  t->allow_data_change_ = start.allow_data_change;
  ModelOptions options;
  options.device = start.device;
  options.precision = ModelPrecision(run.precision());
  if (start.device == Device::kCpu) {  // bf16 without the CPU's bf16 dot products: the fp32 step, said once
    std::string notice;
    options.precision = CpuStepPrecision(options.precision, &notice);
    if (!notice.empty() && t->is_logger()) LogWarning(notice);
  }
  t->step_precision_ = options.precision;
  DataParallelOptions dp_options;
  dp_options.zero1 = run.parallel().zero() == 1;
  dp_options.overlap = run.parallel().dp_overlap() != "off";
  if (const double mb = run.parallel().dp_bucket_mb(); mb > 0) {
    dp_options.bucket_elements = std::max<int64_t>(1, static_cast<int64_t>(mb * (1 << 20) / sizeof(float)));
  }
  auto model = ParallelModel::Create(*grid, dims, options, dp_options);
  if (!model.ok()) return model.status();
  t->model_ = std::move(*model);
  if (dp_options.overlap && grid->shape().dp > 1 && !t->model_->data_parallel().overlapped() && t->is_logger()) {
    // ProcessGrid::DuplicateDp gives an NCCL dp group no second communicator.
    LogInfo("dp reduction: not overlapped with the backward over NCCL yet (--dp_overlap applies to the MPI and "
            "staged paths); it runs after the backward");
  }
  const ParamLayout& layout = t->model_->layout();
  // The step's state lives on its device (DESIGN "Devices"): parameters initialized
  // on the host and uploaded, the named point "parameters in".
  t->state_.params = DeviceArray<float>(start.device);
  t->state_.params.Resize(layout.size());
  {
    HostMirror<float> init(t->state_.params, /*read=*/false);
    InitParams(layout, static_cast<uint64_t>(run.seed()), init.data());
    init.Commit();
  }
  // AdamW over the range this rank updates; scalars (and the Transformer's norm gains)
  // exempt from decay unless asked.
  const auto [begin, end] = t->OptimizerRange();
  std::vector<uint8_t> decay(end - begin, 1);
  if (!run.optimizer().decay_scalars()) {
    for (const ParamEntry& e : layout.entries()) {
      if (!e.is_scalar() && !e.is_gain()) continue;
      for (int64_t i = std::max(begin, e.buffer_offset); i < std::min(end, e.buffer_offset + e.size()); ++i) {
        decay[i - begin] = 0;
      }
    }
  }
  const auto& o = run.optimizer();
  t->optimizer_ = std::make_unique<AdamW>(end - begin, AdamWHyper{o.beta1(), o.beta2(), o.eps(), o.weight_decay()},
                                          std::move(decay), &t->model_->ops());
  t->grads_ = DeviceArray<float>(start.device);
  t->grads_.Resize(layout.size());
  // MFU: FLOPs at the initial windows (the learned windows move; this is the
  // spec's count at initialization) against the peak given, else per process: on the CPU
  // the hardware's peak of the step's precision (trainer/cpu_precision.h: the fp32
  // multiply-add peak, the bf16 dot-product peak for a bf16 step) on the kernels' path and
  // the step's threads, the node's CPUs shared among its ranks (kernels/cpu/fma_peak.h, as
  // bench train reports it), on a GPU its GEMM rate in the step's precision.
  t->flops_per_token_ = TrainingFlopsPerToken(dims, run.seq_len(), InitialWindows(dims));
  // A measured peak is measured again where a step passes it (MfuPeak).
  std::function<double()> measure = [ops = &t->model_->ops(), device = start.device, precision = options.precision,
                                     world = grid->world_size(), local = grid->local_size()] {
    if (device != Device::kCpu) return world * MeasureGemmGflops(*ops, precision, 8192, 0.05);
    const auto hw = kernels::cpu::MeasureHardwarePeak(kernels::cpu::ActiveIsa(), 0.15, local);
    return world * CpuStepPeak(hw, precision == Precision::kBf16 ? "bf16" : "fp32").gflops;
  };
  const double given = start.peak_tflops * 1e3 * grid->world_size();
  t->mfu_peak_ = std::make_unique<MfuPeak>(given > 0 ? given : measure(), given > 0 ? nullptr : measure);
  // The held-out passes first: their windows are fixed by eval.windows (or eval.batches),
  // dp and the data alone, and a problem with them is met before the run directory is
  // made or a checkpoint read.
  t->named_val_ = !sources.val_sources.empty();
  if (run.eval().every() > 0) {
    const int dp = grid->shape().dp;
    // One pass covers eval.windows held-out windows, the same under every layout, or
    // eval.batches × micro_batch of them (data/loader.h ValidationLoader).
    const ValidationOptions vo = RunValidationOptions(run, dp, grid->coord().dp);
    const int64_t batches = vo.windows / run.micro_batch();  // eval.batches rounded up to a multiple of dp
    if (t->is_logger() && !vo.exact && run.eval().batches() % dp != 0) {
      LogWarning("eval.batches=", run.eval().batches(), " is not a multiple of dp=", dp, ": validation takes ", batches,
                 " micro-batches, so its loss is not comparable with other layouts' (eval.windows is)");
    }
    // Each rank opens its own dp shard's windows: what one rank meets ends every rank
    // alike, said once (a collective, reached by every rank).
    auto opened = OpenValidation(run, sources.val_sources, sources.val, dp, grid->coord().dp);
    MS_RETURN_IF_ERROR(AgreeOnStatus(grid->world(), opened.status()));
    for (ValidationSource& v : *opened) {
      // Fewer windows than eval.batches asks for (the stream holds fewer, or dp does not
      // divide them): every window is used once, never repeated, and said (issue 31 §3:
      // "without a word").
      if (t->is_logger() && v.loader->windows() < vo.windows) {
        LogWarning(v.name.empty() ? "validation data" : absl::StrCat("validation source ", v.name), ": eval.batches=",
                   run.eval().batches(), " asks for ", vo.windows, " windows (", batches, " x micro_batch ",
                   run.micro_batch(), "); ", v.loader->stream().size(), " tokens and dp = ", dp, " give ",
                   v.loader->windows(), ": each validation uses those (eval.windows names a count that every layout validates alike)");
      }
    }
    // The pass's windows are fixed: a token id the model cannot embed is found now,
    // not at the first validation hours later (and before that step's checkpoint).
    MS_RETURN_IF_ERROR(AgreeOnStatus(grid->world(), CheckValidationTokenIds(*opened, dims.vocab, dims.name)));
    t->val_loaders_ = *std::move(opened);
  }
  std::error_code ec;
  // A run writes .lock, run.json, metrics.jsonl and checkpoints/ into its directory: never
  // the file system's root; a directory holding other files but no run is said (hidden
  // files do not count: a marker such as scripts/demo's .multiscreen_demo, a .gitkeep).
  const std::filesystem::path canonical = std::filesystem::weakly_canonical(run.run_dir(), ec);
  if (!ec && canonical == canonical.root_path()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--run_dir=", run.run_dir(), " is the file system's root: give the run a directory of its own"));
  }
  auto holds_visible_files = [&] {
    for (const auto& e : std::filesystem::directory_iterator(run.run_dir(), ec)) {
      if (e.path().filename().string().rfind('.', 0) != 0) return true;
    }
    return false;
  };
  if (t->is_logger() && std::filesystem::is_directory(run.run_dir(), ec) && holds_visible_files()) {
    bool a_run = false;
    auto holds = [&](std::string_view name) { return std::filesystem::exists(std::filesystem::path(run.run_dir()) / name, ec); };
    for (std::string_view mark : kRunFiles) a_run = a_run || holds(mark);
    for (std::string_view mark : kRunDirectories) a_run = a_run || holds(mark);
    if (!a_run) {
      LogWarning("--run_dir=", run.run_dir(), " holds files but no run (no run.json, metrics.jsonl or checkpoints/): "
                 "the run's files go among them");
    }
  }
  std::filesystem::create_directories(run.run_dir(), ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat("--run_dir=", run.run_dir(), ": ", ec.message()));
  if (t->is_logger()) {
    // One training process per run directory: a second one would interleave
    // metrics and race on checkpoints.
    auto lock = FileLock::Acquire(run.run_dir() + "/.lock", "train process");
    if (!lock.ok()) {
      return absl::Status(lock.status().code(), absl::StrCat("--run_dir=", run.run_dir(), ": ", lock.status().message()));
    }
    if (!lock->supported()) {
      LogWarning("--run_dir=", run.run_dir(),
                 ": this file system has no flock, so a second train process in the same run directory would not be "
                 "stopped: start one per run directory");
    }
    t->lock_ = std::make_unique<FileLock>(*std::move(lock));
    if (auto s = CheckRunDirWritable(run.run_dir()); !s.ok()) return s;
  }
  grid->world().Barrier();
  if (auto s = t->ResumeIfPresent(start.restart); !s.ok()) return s;
  // The loader starts where the checkpoint (if any) left off: its only state.
  // The global batch is dp · grad_accum · micro_batch windows; this dp rank
  // takes its contiguous slice (micro-batches [d·M, (d+1)·M)).
  const int dp = grid->shape().dp, dp_rank = grid->coord().dp;
  LoaderOptions lo;
  lo.seq_len = run.seq_len();
  lo.global_batch = dp * run.micro_batch() * run.grad_accum();
  lo.dp_rank = dp_rank;
  lo.dp_size = dp;
  lo.seed = static_cast<uint64_t>(run.seed());
  lo.start_sample = t->state_.samples;
  // The loader counts samples on from the checkpoint's; the whole run must
  // stay far inside int64 (a wrapped counter makes the window sampler spin).
  const double last_sample = double(t->state_.samples) +
                             double(std::max<int64_t>(0, run.steps() - t->state_.step)) * double(lo.global_batch);
  if (last_sample > double(int64_t{1} << 62)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "steps: ", run.steps(), " steps of ", lo.global_batch, " windows after the ", t->state_.samples,
        " samples already consumed would count past 2^62 samples"));
  }
  auto loader = sources.mixture.empty() ? TrainLoader::Create(sources.train, lo)
                                        : TrainLoader::Create(sources.mixture, lo);
  if (!loader.ok()) return loader.status();
  t->loader_ = std::move(*loader);
  t->named_train_ = !sources.mixture.empty();
  if (t->is_logger() && run.logging().tensorboard()) {
    auto tb = TensorBoardWriter::Open(run.run_dir() + "/tb");
    if (!tb.ok()) return tb.status();
    t->tensorboard_ = std::move(*tb);
  }
  return t;
}

absl::Status Trainer::ResumeIfPresent(bool restart) {
  progress::SetPhase(progress::Phase::kLoadingCheckpoint);
  // Rank 0 decides (reading every dataset of the checkpoint it picks once) and
  // tells the others the step to resume from, or −1: from step 0.
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<CheckpointRef> ckpt = absl::NotFoundError("not rank 0");
  double chosen = -1;
  absl::Status decided;
  if (is_logger()) {
    ckpt = ChooseStart(restart);
    if (ckpt.ok()) {
      chosen = double(ckpt->meta.step);
    } else if (!absl::IsNotFound(ckpt.status())) {
      decided = ckpt.status();
    }
  }
  if (auto s = AgreeOnStatus(grid_->world(), decided); !s.ok()) return s;
  grid_->world().Broadcast(&chosen, 1, 0);
  if (chosen < 0) return absl::OkStatus();
  if (!is_logger()) {
    ckpt = OpenCheckpoint(run_.run_dir() + "/checkpoints/" + StepDirName(static_cast<int64_t>(chosen)));
    if (!ckpt.ok()) return ckpt.status();
  }
  const CheckpointMeta& m = ckpt->meta;
  // Any saved layout loads into this one; each rank reads the moments of the
  // range its optimizer owns (all of its shard, or its ZeRO-1 share).
  // The named point "resume": read on the host, uploaded to the step's device (the
  // mirrors start from the arrays' values, so that what LoadShard leaves alone stays).
  HostMirror<float> params(state_.params, true), m_host(optimizer_->m(), true), v_host(optimizer_->v(), true);
  if (auto s = LoadShard(*ckpt, model_->layout(), params.data(), m_host.data(), v_host.data(), OptimizerRange());
      !s.ok()) {
    return s;
  }
  params.Commit();
  m_host.Commit();
  v_host.Commit();
  optimizer_->set_step(m.adam_step);
  state_.step = m.step;
  state_.samples = m.samples;
  state_.tokens = m.tokens;
  state_.nonfinite_in_a_row = m.nonfinite_in_a_row;
  // A saved scale of 1 means loss scaling was off (fp32/bf16): a run that turns
  // fp16 on keeps its initial scale.
  if (!(scaler_.enabled() && m.loss_scale == 1.0)) {
    state_.scaler = {m.loss_scale, m.loss_scale_good_steps, m.loss_scale_skipped};
    scaler_.set_state(state_.scaler);
  }
  resumed_ = true;
  if (is_logger()) {
    // Checkpoints newer than this one all failed to verify (the newest that
    // verifies was chosen): out of the way of this run's saves and retention.
    auto moved = SetAsideCheckpoints(run_.run_dir(), m.step);
    if (!moved.ok()) return moved.status();
    for (const std::string& dir : *moved) {
      LogWarning("moved ", dir.substr(dir.rfind('/') + 1), ", newer than step ", m.step,
                 " but not verifiable, to ", dir);
    }
    // The steps after the checkpoint are about to be redone.
    if (auto s = MarkSupersededMetrics(m.step); !s.ok()) return s;
    // Any layout resumes any other, and a dp changed without grad_accum or micro_batch
    // changes the global batch and so the trajectory: said, not refused (docs/parallelism.md
    // "Choosing tp, pp, dp"). run.json holds the batch the run started with.
    std::ifstream identity_file(run_.run_dir() + "/run.json");
    const nlohmann::json identity = identity_file ? nlohmann::json::parse(identity_file, nullptr, false) : nlohmann::json();
    // A run.json that does not parse (cut short, emptied) would turn every check below off
    // unsaid: said once. Warned, not refused: the checkpoint is whole and run.json only informs.
    if (identity_file && !identity.is_object()) {
      LogWarning(run_.run_dir(), "/run.json cannot be read: ",
                 identity.is_discarded() ? "not JSON" : "not a JSON object",
                 "; the resume's seq_len/batch/recipe checks are skipped");
    }
    // What run.json says the run started with (nullopt where it says nothing).
    auto started_with = [&](const char* key) -> std::optional<int64_t> {
      if (!identity.is_object() || !identity.contains(key) || !identity[key].is_number_integer()) return std::nullopt;
      return identity[key].get<int64_t>();
    };
    const int64_t batch = grid_->shape().dp * run_.grad_accum() * run_.micro_batch();
    if (const auto started = started_with("global_batch"); started && *started != batch) {
      LogWarning("the global batch is now ", batch, " windows per step (dp ", grid_->shape().dp, " x grad_accum ",
                 run_.grad_accum(), " x micro_batch ", run_.micro_batch(), "); the run started with ", *started, " (",
                 run_.run_dir(), "/run.json): its trajectory changes here; ",
                 "keep dp x grad_accum x micro_batch fixed to continue it");
    }
    // Validation over other held-out windows than at the start: its losses before and
    // after do not compare (eval.batches moves with micro_batch and dp).
    if (identity.is_object() && identity.contains("val_windows") && !val_loaders_.empty() &&
        identity["val_windows"] != ValidationWindows()) {
      LogWarning("validation now covers ", ValidationWindows().dump(), " held-out windows per pass; the run started with ",
                 identity["val_windows"].dump(), " (", run_.run_dir(), "/run.json): val_loss before and after step ",
                 m.step, " is over other windows; eval.windows (--eval_windows) fixes them under every layout");
    }
    // So do another window length and, for a schedule shaped by the run's length,
    // another --steps (issue 31 §5: a cosine lr jumped from 0.0020 to 0.0238 unsaid).
    if (const auto started = started_with("seq_len"); started && *started != run_.seq_len()) {
      LogWarning("--seq_len is now ", run_.seq_len(), "; the run started with ", *started, " (", run_.run_dir(),
                 "/run.json): its trajectory changes here");
    }
    // And another recipe (trainer/recipe_change.h: lr, precision, AdamW, clipping, schedule).
    const nlohmann::json recipe = identity.is_object() ? identity.value("recipe", nlohmann::json()) : nlohmann::json();
    for (const std::string& line : RecipeChanges(recipe, RecipeOf(run_), run_.run_dir() + "/run.json")) LogWarning(line);
    // The same --precision computing in another precision here (bf16 resumed on a CPU with,
    // or without, bf16 dot products): the recipe lines above do not see it.
    const std::string effective = PrecisionName(step_precision_);
    const nlohmann::json asked = RecipeOf(run_)["precision"];
    if (identity.is_object() && identity.value("effective_precision", nlohmann::json()).is_string() &&
        identity["effective_precision"] != effective && recipe.is_object() &&
        recipe.value("precision", nlohmann::json()) == asked) {
      LogWarning("the step now computes in ", effective, " (--precision=", asked.get<std::string>(), "); it started in ",
                 identity["effective_precision"].get<std::string>(), " (", run_.run_dir(),
                 "/run.json): its trajectory changes here");
    }
    if (const auto started = started_with("steps"); started && *started != run_.steps() && m.step < run_.steps()) {
      const config::ScheduleConfig& schedule = run_.schedule();
      const double peak = run_.optimizer().lr();
      const double before = LearningRate(schedule, peak, m.step + 1, *started);
      const double now = LearningRate(schedule, peak, m.step + 1, run_.steps());
      if (before != now) {
        LogWarning("--steps is now ", run_.steps(), "; the run started with ", *started, " and its ",
                   config::ScheduleConfig::Kind_Name(schedule.kind()), " schedule follows the run's length: the lr of step ",
                   m.step + 1, " is ", absl::StrFormat("%.4g", now), " instead of ", absl::StrFormat("%.4g", before));
      }
    }
    LogInfo("resumed from ", ckpt->dir, " at step ", m.step, " (", m.samples, " samples consumed; saved under tp=",
            m.layout.tp, " pp=", m.layout.pp, " dp=", m.layout.dp, ") in ",
            absl::StrFormat("%.2fs", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
  }
  // A stop signal during the validation of the checkpoint's step cancels it (Validate) and
  // the checkpoint is saved without it: the resumed run owes that validation, or the step
  // (a sweep's budget, the run's last) would never have its validation loss.
  double owed = 0;
  if (is_logger() && IsValidationStep(m.step)) {  // Run() skips it without validation data
    std::ifstream in(MetricsPath(), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    owed = ValidationStandsAt(text, m.step) ? 0 : 1;
  }
  grid_->world().Broadcast(&owed, 1, 0);
  validation_owed_ = owed > 0;
  return absl::OkStatus();
}

bool Trainer::IsValidationStep(int64_t step) const {
  return run_.eval().every() > 0 && (step % run_.eval().every() == 0 || step == run_.steps());
}

absl::StatusOr<bool> Trainer::ValidateAndLog() {
  if (val_loaders_.empty()) return true;
  auto val = Validate();
  if (absl::IsCancelled(val.status())) return false;
  if (!val.ok()) return val.status();
  last_val_loss_ = *val;
  last_val_step_ = state_.step;
  if (!is_logger()) return true;
  nlohmann::json row = {{"step", state_.step}, {"val_loss", *val}};
  if (!named_val_) row["val_windows"] = val_loaders_.front().loader->windows();
  std::string per_source;
  if (named_val_) {
    for (size_t k = 0; k < last_val_losses_.size(); ++k) {
      const auto& [name, loss] = last_val_losses_[k];
      row["val_windows/" + name] = val_loaders_[k].loader->windows();
      row["val_loss/" + name] = loss;
      absl::StrAppend(&per_source, " | ", name, " ", absl::StrFormat("%.4f", loss));
    }
  }
  MS_RETURN_IF_ERROR(AppendMetrics(row.dump()));
  if (tensorboard_ != nullptr) {
    (void)tensorboard_->AddScalar("val/loss", *val, state_.step);
    if (named_val_) {
      for (const auto& [name, loss] : last_val_losses_) (void)tensorboard_->AddScalar("val_loss/" + name, loss, state_.step);
    }
  }
  std::fprintf(stderr, "step %lld/%lld | val_loss %.4f%s\n", (long long)state_.step, (long long)run_.steps(), *val,
               per_source.c_str());
  return true;
}

absl::StatusOr<CheckpointRef> Trainer::ChooseStart(bool restart) {
  const std::string root = run_.run_dir() + "/checkpoints";
  absl::StatusOr<CheckpointRef> ckpt = std::filesystem::exists(root)
                                           ? FindLatestCheckpoint(run_.run_dir())
                                           : absl::NotFoundError(absl::StrCat(root, ": none"));
  if (ckpt.ok()) {
    if (restart && is_logger()) {
      LogWarning("--restart: ", ckpt->dir, " verifies, so the run resumes from it (--restart applies only when no "
                 "checkpoint verifies; a new --run_dir starts over)");
    }
    if (ckpt->meta.seed != run_.seed()) {
      return absl::FailedPreconditionError(absl::StrCat(ckpt->dir, ": saved with seed ", ckpt->meta.seed,
                                                        ", the run asks for ", run_.seed(),
                                                        " (the data order depends on it)"));
    }
    MS_RETURN_IF_ERROR(CheckSameData(ckpt->dir, ckpt->meta.data));
    return ckpt;
  }
  if (absl::IsNotFound(ckpt.status())) {
    // `latest` is written only once a checkpoint is complete: naming one that is gone, it
    // says checkpoints existed (moved, deleted, on a file system not mounted now), so
    // starting over would bury them, as when none verifies (issue 31 §5).
    std::ifstream latest(root + "/latest");
    std::string named;
    if (latest && std::getline(latest, named) && !named.empty()) {
      const std::string gone = absl::StrCat(root, "/latest names ", named, ", which is gone (",
                                            ckpt.status().message(), ")");
      if (!restart) {
        return absl::FailedPreconditionError(absl::StrCat(
            gone, "; checkpoints were saved: nothing was changed: bring them back, or pass --restart to train from "
            "step 0"));
      }
      LogWarning("--restart: ", gone);
      MS_RETURN_IF_ERROR(StartFresh(ckpt.status(), "--restart given and the checkpoints are gone"));
      std::error_code ec;
      std::filesystem::remove(root + "/latest", ec);  // it names nothing now
      return ckpt.status();
    }
    MS_RETURN_IF_ERROR(StartFresh(ckpt.status(), "no checkpoint was saved before the run stopped"));
    return ckpt.status();
  }
  // Checkpoints exist and none verifies (a shard on a file system that is not
  // mounted, say): starting over would bury them, so only on request.
  if (!restart) {
    return absl::FailedPreconditionError(absl::StrCat(
        ckpt.status().message(), "; nothing was changed: make them whole, or pass --restart to move them to ",
        root, "/unverified/ and train from step 0"));
  }
  MS_RETURN_IF_ERROR(CheckSameRun(ckpt.status()));
  auto moved = SetAsideCheckpoints(run_.run_dir(), -1);
  if (!moved.ok()) return moved.status();
  LogWarning("--restart: ", ckpt.status().message(), "; moved them to ", root, "/unverified/");
  MS_RETURN_IF_ERROR(StartFresh(ckpt.status(), "--restart given and no checkpoint verifies"));
  return absl::NotFoundError(absl::StrCat(root, ": set aside"));
}

absl::Status Trainer::CheckSameData(const std::string& checkpoint, const nlohmann::json& saved) const {
  if (!saved.is_object() || saved == data_) return absl::OkStatus();
  auto describe = [](const nlohmann::json& sources) {
    std::vector<std::string> parts;
    for (const auto& [name, s] : sources.items()) {
      // A mixture's sources carry their weight: a changed weight alone is named too.
      parts.push_back(absl::StrCat(name, ": ", s.value("tokens", int64_t{-1}), " tokens, fingerprint ",
                                   s.value("fingerprint", std::string("?")),
                                   s.contains("weight") ? absl::StrCat(", weight ", s["weight"].dump()) : ""));
    }
    return absl::StrJoin(parts, "; ");
  };
  const std::string what = absl::StrCat(checkpoint, " was trained on other data (", describe(saved),
                                        "; this run has ", describe(data_), ")");
  if (allow_data_change_) {
    LogWarning(what, "; resuming on this run's data (--allow_data_change)");
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      what, ": its samples counter would index other windows; give the same --data, or pass --allow_data_change "
            "to continue on these"));
}

// The identity of a run: what must match for its metrics to be redone from
// step 0 when it was stopped before its first checkpoint.
nlohmann::json Trainer::RunIdentity() const {
  return {{"model", dims_.name}, {"seed", run_.seed()}, {"seq_len", run_.seq_len()},
          {"global_batch", grid_->shape().dp * run_.grad_accum() * run_.micro_batch()}};
}

nlohmann::json Trainer::ValidationWindows() const {
  nlohmann::json windows;
  for (const ValidationSource& v : val_loaders_) windows[v.name.empty() ? "val" : v.name] = v.loader->windows();
  return windows;
}

std::string Trainer::MetricsPath() const { return run_.run_dir() + "/metrics.jsonl"; }

absl::Status Trainer::CheckSameRun(const absl::Status& why_no_checkpoint) const {
  const std::string metrics = MetricsPath();
  const bool has_metrics = std::filesystem::exists(metrics) && std::filesystem::file_size(metrics) > 0;
  std::ifstream in(run_.run_dir() + "/run.json");
  nlohmann::json saved = in ? nlohmann::json::parse(in, nullptr, false) : nlohmann::json();
  if (saved.is_object()) {  // not part of the identity
    saved.erase("steps");
    saved.erase("val_windows");
    saved.erase("recipe");
    saved.erase("build");
    saved.erase("effective_precision");
  }
  if (has_metrics && saved != RunIdentity()) {
    // Metrics of another run (or of one we cannot tell is this one): keep them.
    return absl::FailedPreconditionError(absl::StrCat(
        "--run_dir=", run_.run_dir(), " already holds a run (", metrics, ") with no checkpoint to resume from (",
        why_no_checkpoint.message(), ")", saved.is_object() ? " and a different model, seed or batch" : "",
        "; choose a new --run_dir or remove the old one"));
  }
  return absl::OkStatus();
}

absl::Status Trainer::StartFresh(const absl::Status& why_no_checkpoint, const std::string& why_restart) {
  MS_RETURN_IF_ERROR(CheckSameRun(why_no_checkpoint));
  const std::string metrics = MetricsPath();
  if (std::filesystem::exists(metrics) && std::filesystem::file_size(metrics) > 0) {
    // The same run: from step 0 it retraces the same steps, so its metrics
    // are redone; the old rows stay, marked superseded.
    LogWarning("--run_dir=", run_.run_dir(), ": ", why_restart, "; restarting it from step 0");
    MS_RETURN_IF_ERROR(MarkSupersededMetrics(0));
  }
  const std::string identity_path = run_.run_dir() + "/run.json";
  // The identity, and what a resume may change but should hear about: the run's length
  // (it shapes every schedule but WARMUP_CONSTANT) and its recipe (RecipeOf).
  nlohmann::json identity = RunIdentity();
  identity["steps"] = run_.steps();
  if (!val_loaders_.empty()) identity["val_windows"] = ValidationWindows();
  // The recipe keeps the requested precision (what a resume's flags compare with, and what
  // a resume on a CPU with bf16 dot products gets back); beside it what the step computes
  // in here (bf16 falls back to fp32 on a CPU path without bf16 dot products).
  identity["recipe"] = RecipeOf(run_);
  identity["effective_precision"] = PrecisionName(step_precision_);
  // The build that started the run (not part of the identity: a rebuilt binary resumes it).
  identity["build"] = {{"version", ThisBuild().version}, {"commit", ThisBuild().commit}};
  // Written beside and renamed into place (as status.json): a crash mid-write leaves the
  // old run.json or the new one, never a cut-short one.
  return WriteTextFile(identity_path, identity.dump() + "\n");
}

absl::Status Trainer::MarkSupersededMetrics(int64_t step) {
  const std::string path = MetricsPath();
  int64_t superseded = 0;
  bool ends_with_newline = true;
  {
    std::ifstream in(path, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.empty()) return absl::OkStatus();
    ends_with_newline = text.back() == '\n';
    superseded = StandingRowsAfter(text, step);
  }
  // A row cut short by a crash stays on a line of its own (readers skip it).
  if (!ends_with_newline) MS_RETURN_IF_ERROR(AppendMetrics(""));
  if (superseded == 0) return absl::OkStatus();
  LogInfo(path, ": ", superseded, " rows of steps after ", step, " are superseded by this run's");
  return AppendMetrics(nlohmann::json{{"resumed_from", step}, {"superseded_rows", superseded}}.dump());
}

absl::Status Trainer::SaveCheckpointNow() {
  progress::SetPhase(progress::Phase::kSavingCheckpoint);
  CheckpointMeta m;
  m.step = state_.step;
  m.samples = state_.samples;
  m.tokens = state_.tokens;
  m.adam_step = optimizer_->step();
  m.seed = run_.seed();
  m.data = data_;
  m.nonfinite_in_a_row = state_.nonfinite_in_a_row;
  m.loss_scale = scaler_.scale();  // 1 when loss scaling is off
  m.loss_scale_good_steps = state_.scaler.good_steps;
  m.loss_scale_skipped = state_.scaler.skipped;
  m.dims = dims_;
  const GridShape& shape = grid_->shape();
  m.layout = {shape.tp, shape.pp, shape.dp, run_.parallel().zero()};
  const auto start = std::chrono::steady_clock::now();
  // Rank 0 prepares the temporary directory; dp replica 0 writes one shard per
  // model-parallel rank (with the moments, unless ZeRO-1 spread them); under
  // ZeRO-1 every dp rank writes its own optimizer piece. Rank 0 then gathers
  // the files' records and commits. The ranks agree on each phase's outcome,
  // so that a failure anywhere (a full disk) ends every rank with its cause,
  // after rank 0 has removed the partial checkpoint.
  const std::string tmp = TempCheckpointDir(run_.run_dir(), m.step);
  // Never a checkpoint of diverged parameters over the last good one.
  absl::Status status;
  // The named point "checkpoint save": the step device's state downloaded (on the CPU,
  // read in place).
  HostMirror<float> params(state_.params, /*read=*/true), m_host(optimizer_->m(), true), v_host(optimizer_->v(), true);
  for (const ParamEntry& e : model_->layout().entries()) {
    const float* p = params.data() + e.buffer_offset;
    const auto bad = std::find_if(p, p + e.size(), [](float x) { return !std::isfinite(x); });
    if (bad != p + e.size()) {
      status = absl::AbortedError(absl::StrCat("step ", m.step, ": parameter ", e.name, " holds ", *bad,
                                               "; the run diverged, not saving it (the last checkpoint stays the newest)"));
      break;
    }
  }
  MS_RETURN_IF_ERROR(AgreeOnStatus(grid_->world(), status));
  if (is_logger()) status = BeginCheckpoint(run_.run_dir(), m.step).status();
  MS_RETURN_IF_ERROR(AgreeOnStatus(grid_->world(), status));
  const bool zero = model_->data_parallel().options().zero1;
  const GridCoord& c = grid_->coord();
  if (c.dp == 0) {
    ShardTensors shard{&model_->layout(), params.data(), zero ? nullptr : m_host.data(),
                       zero ? nullptr : v_host.data(), c.pp, c.tp};
    auto record = WriteShard(tmp, shard);
    status = record.ok() ? WriteFileRecord(tmp, ShardFileName(c.pp, c.tp), *record) : record.status();
  }
  if (zero && status.ok()) {
    const auto [begin, end] = OptimizerRange();
    OptimizerPiece piece{&model_->layout(), begin, end, m_host.data(), v_host.data(),
                         c.pp, c.tp, c.dp};
    auto record = WriteOptimizerPiece(tmp, piece);
    status = record.ok() ? WriteFileRecord(tmp, OptimizerFileName(c.pp, c.tp, c.dp), *record) : record.status();
  }
  status = AgreeOnStatus(grid_->world(), status);
  if (status.ok() && is_logger()) {
    auto files = ReadFileRecords(tmp, CheckpointFiles(m.layout));
    auto dir = files.ok() ? CommitCheckpoint(run_.run_dir(), tmp, m, *files, run_.checkpoint().keep_last(),
                                             run_.checkpoint().keep_every())
                          : files.status();
    if (dir.ok()) {
      LogInfo("saved ", *dir, " in ",
              absl::StrFormat("%.2fs", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
    }
    status = dir.status();
  }
  if (!status.ok() && is_logger() && std::filesystem::exists(tmp)) {
    int64_t bytes = 0;
    for (const ShardPlan& p : PlanCheckpoint(dims_, m.layout)) bytes += p.weight_bytes + p.moment_bytes;
    status = AbandonCheckpoint(tmp, status, bytes);
  }
  // Rank 0's outcome (with what AbandonCheckpoint added) is every rank's.
  return AgreeOnStatus(grid_->world(), status);
}

absl::Status Trainer::AppendMetrics(const std::string& line) {
  const std::string path = run_.run_dir() + "/metrics.jsonl";
  std::ofstream out(path, std::ios::app);
  errno = 0;
  out << line << "\n";
  if (!out.flush()) return WriteError(path, "write failed", errno);
  return absl::OkStatus();
}

absl::StatusOr<double> Trainer::Step(double lr, double* grad_norm, bool* applied) {
  const int64_t B = run_.micro_batch(), T = run_.seq_len(), accum = run_.grad_accum();
  const double scale = scaler_.scale();
  progress::SetStep(state_.step, run_steps_);
  progress::SetPhase(progress::Phase::kReadingData);
  auto next = loader_->Next();  // this dp rank's accum micro-batches of B windows
  if (!next.ok()) return next.status();
  const Batch& batch = *next;
  absl::Status ids = CheckTokenIds(batch, dims_.vocab, dims_.name, "training", [&](int64_t row, int64_t col) {
    return loader_->Locate(batch.first_sample + row, col);
  });
  // The first step of a start: shards of another tokenizer show in every rank's windows,
  // so the ranks agree (one line, rank 0's window; a single rank's named) and each exits 1.
  // Later, an id that one rank meets ends the job at once (MPI_Abort).
  if (run_steps_ == 0 && grid_->world_size() > 1) {
    ids = AgreeOnError(grid_->world(), ids, /*name_rank=*/true);
    if (!ids.ok()) return MarkAgreed(ids);
  }
  if (!ids.ok()) return ids;
  progress::SetPhase(progress::Phase::kForwardBackward);
  auto loss = ComputeGradients(*grid_, *model_, state_.params.data(), batch.tokens.data(), {accum, B, T},
                               grads_.data(), scale);
  if (!loss.ok()) return loss.status();
  comm_exposed_s_ = model_->comm_times().exposed_s();
  // Unscale, and check that the step is finite (the norm is a collective, so
  // every rank decides alike). On the step's device, through its kernel table.
  kernels::KernelTable<float>& ops = model_->ops();
  const float inv = static_cast<float>(1.0 / scale);
  ops.Scale(grads_.data(), grads_.size(), inv);
  *grad_norm = GlobalGradNorm(*grid_, *model_, grads_.data());
  const bool finite = std::isfinite(*loss) && std::isfinite(*grad_norm);
  *applied = scaler_.Update(finite);
  state_.scaler = scaler_.state();
  if (*applied) {
    progress::SetPhase(progress::Phase::kOptimizer);
    const auto [begin, end] = OptimizerRange();
    if (run_.optimizer().grad_clip() > 0 && *grad_norm > run_.optimizer().grad_clip()) {
      const float c = static_cast<float>(run_.optimizer().grad_clip() / *grad_norm);
      ops.Scale(grads_.data() + begin, end - begin, c);
    }
    optimizer_->Step(state_.params.data() + begin, grads_.data() + begin, lr);
    const auto gather_start = std::chrono::steady_clock::now();
    if (model_->data_parallel().options().zero1) model_->data_parallel().AllGatherParams(state_.params.data());
    comm_exposed_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - gather_start).count();
    state_.nonfinite_in_a_row = 0;
  } else {
    ++state_.nonfinite_in_a_row;
  }
  const int64_t global = grid_->shape().dp * accum * B;
  state_.samples += global;
  state_.tokens += global * T;
  ++state_.step;
  return *loss;
}

absl::StatusOr<double> Trainer::Validate() {
  progress::SetPhase(progress::Phase::kValidation);
  if (val_loaders_.empty()) return absl::FailedPreconditionError("no validation data");
  // The loss comes through the same pipeline as training, forwards only.
  std::vector<std::pair<std::string, double>> losses;
  double weighted = 0, weights = 0;
  for (const ValidationSource& source : val_loaders_) {
    const ValidationLoader& val = *source.loader;
    double loss = 0;
    int64_t rows = 0;
    for (int64_t b = 0; b < val.num_batches(); ++b) {
      // A stop signal ends the pass (every rank alike: the world's maximum decides), so
      // that a long validation cannot delay the checkpoint a preemption asks for.
      double stop_flag = StopRequested() ? 1.0 : 0.0;
      grid_->world().AllReduce(&stop_flag, 1, ReduceOp::kMax);
      if (stop_flag > 0) return absl::CancelledError("validation stopped by a signal");
      const Batch batch = val.Get(b);
      if (auto s = CheckTokenIds(batch, dims_.vocab, dims_.name, "validation",
                                 [&](int64_t row, int64_t col) {
                                   return val.stream().Locate((batch.first_sample + row) * run_.seq_len() + col);
                                 });
          !s.ok()) {
        return s;
      }
      // Each micro-batch's loss is the mean over its rows (all replicas alike); weighted by
      // rows, the pass's loss is the mean over its windows whatever the layout.
      auto l = EvaluateLoss(*grid_, *model_, state_.params.data(), batch.tokens.data(),
                            {1, batch.rows, run_.seq_len()});
      if (!l.ok()) return l.status();
      loss += *l * double(batch.rows);
      rows += batch.rows;
    }
    loss /= double(rows);
    losses.emplace_back(source.name, loss);
    weighted += source.weight * loss;
    weights += source.weight;
  }
  if (named_val_) last_val_losses_ = std::move(losses);
  return weighted / weights;
}

absl::Status Trainer::LogStep(double loss, double lr, double grad_norm, bool applied, double seconds) {
  if (!is_logger()) return absl::OkStatus();
  const int64_t step_tokens = grid_->shape().dp * run_.grad_accum() * run_.micro_batch() * run_.seq_len();
  const double tokens_per_s = double(step_tokens) / seconds;
  const double achieved_gflops = tokens_per_s * flops_per_token_ / 1e9;
  if (const std::string stale = mfu_peak_->Update(achieved_gflops); !stale.empty()) LogWarning(stale);
  const double mfu = achieved_gflops / mfu_peak_->gflops();
  nlohmann::json j = {{"step", state_.step},       {"loss", loss},
                      {"lr", lr},                  {"grad_norm", grad_norm},
                      {"tokens", state_.tokens},   {"tokens_per_s", tokens_per_s},
                      {"mfu", mfu},                {"loss_scale", scaler_.scale()},
                      {"skipped", !applied},       {"comm_exposed_s", comm_exposed_s_}};
  if (!std::isfinite(loss)) j["loss"] = nullptr;
  if (!std::isfinite(grad_norm)) j["grad_norm"] = nullptr;
  // Tokens drawn from each source of a mixture so far: a pure function of the samples.
  std::vector<std::pair<std::string, int64_t>> source_tokens;
  if (named_train_) {
    for (int k = 0; k < loader_->schedule().num_sources(); ++k) {
      source_tokens.emplace_back(loader_->sources()[k].name,
                                 loader_->schedule().CountBefore(k, state_.samples) * run_.seq_len());
      j["tokens/" + source_tokens.back().first] = source_tokens.back().second;
    }
  }
  if (auto s = AppendMetrics(j.dump()); !s.ok()) return s;
  if (tensorboard_ != nullptr) {
    (void)tensorboard_->AddScalar("train/loss", loss, state_.step);
    (void)tensorboard_->AddScalar("train/lr", lr, state_.step);
    (void)tensorboard_->AddScalar("train/grad_norm", grad_norm, state_.step);
    (void)tensorboard_->AddScalar("train/tokens_per_s", tokens_per_s, state_.step);
    (void)tensorboard_->AddScalar("train/mfu", mfu, state_.step);
    for (const auto& [name, tokens] : source_tokens) {
      (void)tensorboard_->AddScalar("train/tokens/" + name, double(tokens), state_.step);
    }
    if (auto s = tensorboard_->Flush(); !s.ok()) return s;
  }
  if (!applied) {
    LogWarning("step ", state_.step, ": non-finite loss or gradients, step skipped",
               scaler_.enabled() ? absl::StrCat(" (loss scale now ", scaler_.scale(), ")") : "",
               "; the lr schedule stays at ", optimizer_->step(), " applied steps");
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
  if (validation_owed_) {
    // The checkpoint's step lost its validation to the stop signal that saved it.
    auto done = ValidateAndLog();
    if (!done.ok()) return done.status();
    validation_owed_ = false;
    if (!*done) {
      // Stopped again (every rank alike: Validate agrees): still owed, and the run is
      // stopped, not finished, so that whatever resumes it runs the validation.
      stopped_by_signal_ = true;
      if (is_logger()) LogInfo("signal received: stopped at step ", state_.step, " before its validation");
      return WriteRunStatus();
    }
  }
  if (state_.step >= run_.steps() && is_logger()) {
    LogInfo("nothing to do: the run already reached step ", state_.step, " of ", run_.steps());
  }
  while (state_.step < run_.steps()) {
    // Warmup and decay count applied updates (AdamW's step count, saved in the
    // manifest): a step skipped for overflow does not advance the schedule.
    const double lr = LearningRate(run_.schedule(), run_.optimizer().lr(), optimizer_->step(), run_.steps());
    const auto start = std::chrono::steady_clock::now();
    double grad_norm = 0;
    bool applied = false;
    auto loss = Step(lr, &grad_norm, &applied);
    if (!loss.ok()) return loss.status();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    run_seconds_ += seconds;
    ++run_steps_;
    progress::SetStep(state_.step, run_steps_);
    progress::SetPhase(progress::Phase::kLogging);
    last_loss_ = *loss;
    if (auto s = LogStep(*loss, lr, grad_norm, applied, seconds); !s.ok()) return s;
    if (!applied && !scaler_.enabled()) {
      // fp32/bf16: nothing to back off, and every later step would be the same.
      return absl::AbortedError(absl::StrCat(
          "step ", state_.step, ": non-finite ", std::isfinite(*loss) ? "gradients" : "loss",
          " (loss ", *loss, ", grad norm ", grad_norm, ") in ", config::RunConfig::Precision_Name(run_.precision()),
          " training; the run diverged, stopped without saving (the last checkpoint stays the newest)"));
    }
    if (state_.nonfinite_in_a_row >= run_.max_nonfinite_steps()) {
      return absl::AbortedError(absl::StrCat("step ", state_.step, ": ", state_.nonfinite_in_a_row,
                                             " non-finite steps in a row (max_nonfinite_steps = ",
                                             run_.max_nonfinite_steps(), "); the run diverged"));
    }
    if (IsValidationStep(state_.step)) {
      // Cancelled by a stop signal: the checkpoint below is saved without it, and the
      // resumed run owes it (ResumeIfPresent).
      if (auto done = ValidateAndLog(); !done.ok()) return done.status();
    }
    // Every rank must agree to stop at the same step (signals reach ranks at
    // different moments): the world's maximum decides.
    progress::SetPhase(progress::Phase::kLogging);
    double stop_flag = StopRequested() ? 1.0 : 0.0;
    grid_->world().AllReduce(&stop_flag, 1, ReduceOp::kMax);
    const bool stop = stop_flag > 0;
    const bool periodic = run_.checkpoint().every() > 0 && state_.step % run_.checkpoint().every() == 0;
    if (stop || periodic || state_.step == run_.steps()) {
      if (auto s = SaveCheckpointNow(); !s.ok()) return s;
    }
    if (stop) {
      stopped_by_signal_ = true;
      if (is_logger()) LogInfo("signal received: stopped after step ", state_.step, " with a checkpoint saved");
      break;
    }
  }
  return WriteRunStatus();
}

absl::Status Trainer::WriteRunStatus() {
  if (!is_logger()) return absl::OkStatus();
  const std::string path = run_.run_dir() + "/status.json";
  const nlohmann::json status = {{"state", stopped_by_signal_ ? "stopped" : "finished"},
                                 {"step", state_.step},
                                 {"steps", run_.steps()}};
  // Whole or not at all: an empty file renamed into place reads as a crash to train.sbatch.
  return WriteTextFile(path, status.dump() + "\n");
}

}  // namespace multiscreen
