// `multiscreen train --config=FILE [--run_dir= --steps= --seed= --tp= --pp=
// --micro_batch= --grad_accum= --seq_len= --lr= --precision= --checkpoint_every=
// --eval_every= --eval_windows= --data= --model= --zero= --dp_overlap= --dp_bucket_mb= --restart]`: the main job. Flags
// override the run file's fields. A run_dir with a checkpoint is resumed; one
// whose checkpoints all fail to verify is refused unless --restart.
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <regex>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/commands.h"
#include "cli/created_dirs.h"
#include "cli/device_memory.h"
#include "cli/flags.h"
#include "cli/planner.h"
#include "common/build_info.h"
#include "common/config.h"
#include "common/log.h"
#include "common/status.h"
#include "common/text_file.h"
#include "data/loader.h"
#include "kernels/buffer.h"
#include "cli/device.h"
#include "kernels/cpu/isa.h"
#include "kernels/precision_name.h"
#include "model/multiscreen.h"
#include "nlohmann/json.hpp"
#include "parallel/fatal.h"
#include "parallel/launcher.h"
#include "parallel/mpi_communicator.h"
#include "parallel/mpi_session.h"
#include "parallel/process_grid.h"
#include "trainer/run_data.h"
#include "trainer/run_agreement.h"
#include "trainer/stop_signal.h"
#include "trainer/cpu_precision.h"
#include "trainer/trainer.h"

ABSL_FLAG(std::string, config, "", "run configuration (RunConfig text proto), e.g. configs/train/psi8_demo.textproto");
ABSL_FLAG(std::string, run_dir, "", "directory for metrics, TensorBoard events and checkpoints");
ABSL_FLAG(int64_t, steps, 0, "optimizer steps");
ABSL_FLAG(int64_t, tp, 1, "tensor-parallel degree");
ABSL_FLAG(int64_t, pp, 1, "pipeline stages");
ABSL_FLAG(int64_t, grad_accum, 1, "micro-batches per optimizer step");
ABSL_FLAG(double, lr, 0.0625, "peak learning rate");
ABSL_FLAG(int64_t, checkpoint_every, 0, "steps between checkpoints (0: at the end and on signals only)");
ABSL_FLAG(int64_t, eval_every, 0, "steps between validation passes (0: never)");
ABSL_FLAG(int64_t, eval_windows, 0,
          "held-out windows per validation pass, the same under every layout (a multiple of dp; replaces the run "
          "file's eval.batches; 0: eval.batches)");
ABSL_FLAG(std::string, data, "", "directory of token shards from `prepare` (train_*.bin, val_*.bin)");
ABSL_FLAG(std::string, format, "auto",
          "token file format of train's and eval ppl's --data and forward's --tokens: auto, llmc, megatron (a "
          ".bin/.idx pair) or raw_uint16 (nanoGPT's .bin); for eval choice the benchmark format of --task: "
          "hellaswag, piqa, arc or winogrande (required there)");
ABSL_FLAG(int64_t, zero, 0, "1: shard the optimizer state over data-parallel ranks (ZeRO-1)");
ABSL_FLAG(std::string, dp_overlap, "on",
          "on: reduce each data-parallel gradient bucket on a communication thread as soon as the backward has "
          "finished it; off: all of them after the backward (the same gradients bit for bit)");
ABSL_FLAG(double, dp_bucket_mb, 16,
          "MiB of fp32 gradients per data-parallel collective (the unit --dp_overlap starts as soon as it is final)");
ABSL_FLAG(double, collective_timeout, 600,
          "seconds a rank may wait in one collective before the job ends with one line naming the rank that did "
          "not arrive and what it was doing (3x this in start-up, the first step, checkpoints and validation); "
          "0 (600) or 1 to 10000000 (116 days)");
ABSL_FLAG(bool, allow_data_change, false,
          "resume from a checkpoint trained on other data (its manifest's token counts and fingerprints differ from "
          "--data's); without it such a resume is refused");
ABSL_FLAG(std::string, comm, "auto",
          "auto | mpi | staged | nccl: how the tp, pp and dp groups move the step's buffers (auto: MPI on the "
          "cpu; on GPUs NCCL when each rank of a node has a GPU of its own, else MPI staged through host memory)");
ABSL_DECLARE_FLAG(std::string, device_memory);  // planner.cc (DeviceMemoryFlag)
ABSL_FLAG(bool, restart, false,
          "when none of run_dir's checkpoints verifies, move them to checkpoints/unverified/ and train from step 0 "
          "(without it such a run is refused); a checkpoint that verifies is still resumed");

namespace multiscreen::cli {
namespace {

// The first token shard found directly in `dir` (a name ending in train_NNNNNN.bin or
// val_NNNNNN.bin, as prepare and llm.c write them) or prepare's lock file, else "".
std::string PreparedShardIn(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return "";
  const std::regex shard(R"((^|.*_)(train|val)_[0-9]{6}\.bin$)");
  std::string first;  // the first shard by name: the same in every listing order
  bool lock = false;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    lock = lock || name == ".prepare.lock";
    if (std::regex_match(name, shard) && (first.empty() || name < first)) first = name;
  }
  return first.empty() && lock ? ".prepare.lock" : first;
}

// <run_dir>/data.json: what later commands (`eval`, `generate`) need to know of the run's data
// without the current directory: the tokenizer (the run file's data.tokenizer_dir, else
// --tokenizer's default where it exists), as an absolute path, and the longest training
// sequence length of any start of the run (a continued pretraining at a longer context
// raises it). Rewritten at every start; failing to write it only warns.
void RecordRunData(const config::RunConfig& run) {
  namespace fs = std::filesystem;
  const fs::path path = fs::path(run.run_dir()) / "data.json";
  nlohmann::json data = nlohmann::json::object();
  if (std::ifstream in(path); in) {
    data = nlohmann::json::parse(in, nullptr, false);
    if (!data.is_object()) data = nlohmann::json::object();
  }
  const std::string tokenizer = run.data().tokenizer_dir().empty() ? absl::GetFlag(FLAGS_tokenizer) : run.data().tokenizer_dir();
  std::error_code ec;
  if (fs::is_directory(tokenizer, ec)) data["tokenizer_dir"] = fs::absolute(tokenizer, ec).lexically_normal().string();
  const int64_t before = data.contains("max_seq_len") && data["max_seq_len"].is_number_integer() ? data["max_seq_len"].get<int64_t>() : 0;
  data["max_seq_len"] = std::max(before, run.seq_len());
  // Nothing half-written stays in the run directory (WriteTextFile removes its temporary).
  if (auto s = WriteTextFile(path.string(), data.dump() + "\n"); !s.ok()) {
    LogWarning(s.message(), "; eval and generate will not find the run's tokenizer by themselves");
  }
}

// The run: --config's file with the given flags (GivenFlags) over its fields; *source
// records which fields a flag set, so that ValidateRun's errors name that flag.
// *start_warning: a warning about the run as asked (a --data file turns validation off),
// for the start lines; empty when there is none. Never printed here: a run refused later
// (its --data not token data, a flag out of range) says only its error.
absl::StatusOr<config::RunConfig> BuildRun(const std::vector<std::string>& given, RunSource* source,
                                           std::string* start_warning) {
  config::RunConfig run;
  source->file = absl::GetFlag(FLAGS_config);
  // Whether --flag overrides the run file's `field`; if so, errors about the field name the flag.
  auto from_flag = [&](const char* flag, const char* field) {
    if (!Given(given, flag)) return false;
    source->flags[field] = flag;
    return true;
  };
  if (Given(given, "config") && absl::GetFlag(FLAGS_config).empty()) {
    return absl::InvalidArgumentError("--config= is empty: give a run file, or leave the flag out");
  }
  if (const std::string path = absl::GetFlag(FLAGS_config); !path.empty()) {
    auto parsed = LoadRunConfig(path);
    if (!parsed.ok()) return parsed.status();
    run = *parsed;
  }
  // In the run file 0 means "the default" (1) for these; on the command line it is a mistake.
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"grad_accum", absl::GetFlag(FLAGS_grad_accum)},
                                    {"tp", absl::GetFlag(FLAGS_tp)},
                                    {"pp", absl::GetFlag(FLAGS_pp)}}) {
    if (Given(given, name) && value < 1) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, "=", value, " must be at least 1"));
    }
  }
  if (Given(given, "run_dir")) run.set_run_dir(absl::GetFlag(FLAGS_run_dir));
  if (from_flag("steps", "steps")) run.set_steps(absl::GetFlag(FLAGS_steps));
  if (Given(given, "seed")) run.set_seed(absl::GetFlag(FLAGS_seed));
  if (from_flag("tp", "parallel.tp")) run.mutable_parallel()->set_tp(absl::GetFlag(FLAGS_tp));
  if (from_flag("pp", "parallel.pp")) run.mutable_parallel()->set_pp(absl::GetFlag(FLAGS_pp));
  if (from_flag("zero", "parallel.zero")) run.mutable_parallel()->set_zero(absl::GetFlag(FLAGS_zero));
  if (from_flag("dp_overlap", "parallel.dp_overlap")) run.mutable_parallel()->set_dp_overlap(absl::GetFlag(FLAGS_dp_overlap));
  if (from_flag("dp_bucket_mb", "parallel.dp_bucket_mb")) {
    run.mutable_parallel()->set_dp_bucket_mb(absl::GetFlag(FLAGS_dp_bucket_mb));
  }
  if (from_flag("collective_timeout", "parallel.collective_timeout_s")) {
    run.mutable_parallel()->set_collective_timeout_s(absl::GetFlag(FLAGS_collective_timeout));
  }
  if (from_flag("micro_batch", "micro_batch")) run.set_micro_batch(absl::GetFlag(FLAGS_micro_batch));
  if (from_flag("grad_accum", "grad_accum")) run.set_grad_accum(absl::GetFlag(FLAGS_grad_accum));
  if (from_flag("seq_len", "seq_len")) run.set_seq_len(absl::GetFlag(FLAGS_seq_len));
  if (from_flag("lr", "optimizer.lr")) run.mutable_optimizer()->set_lr(absl::GetFlag(FLAGS_lr));
  if (from_flag("checkpoint_every", "checkpoint.every")) run.mutable_checkpoint()->set_every(absl::GetFlag(FLAGS_checkpoint_every));
  if (from_flag("eval_every", "eval.every")) run.mutable_eval()->set_every(absl::GetFlag(FLAGS_eval_every));
  // --eval_windows=N replaces the run file's eval.batches; =0 leaves eval.batches as it is.
  if (from_flag("eval_windows", "eval.windows")) {
    run.mutable_eval()->set_windows(absl::GetFlag(FLAGS_eval_windows));
    if (run.eval().windows() != 0) run.mutable_eval()->clear_batches();
  }
  if (Given(given, "model")) run.set_model(absl::GetFlag(FLAGS_model));
  if (Given(given, "data")) {
    run.mutable_data()->clear_sources();
    run.mutable_data()->clear_val_sources();
    run.mutable_data()->clear_train_shards();
    run.mutable_data()->add_train_shards(absl::GetFlag(FLAGS_data));
    // A directory holds train_*.bin and (usually) val_*.bin; a single file is
    // training data only, never its own validation set.
    if (std::filesystem::is_directory(absl::GetFlag(FLAGS_data))) {
      run.mutable_data()->set_val_shard(absl::GetFlag(FLAGS_data));
    } else {
      run.mutable_data()->clear_val_shard();
      // (A path that is not there is refused when the shards are opened, without this.)
      if ((run.eval().every() > 0 || Given(given, "eval_windows")) &&
          std::filesystem::exists(absl::GetFlag(FLAGS_data))) {
        *start_warning = absl::StrCat("--data=", absl::GetFlag(FLAGS_data), " is a file: training data only, so "
                                      "validation is off (a --data directory with val_*.bin, or data.val_shard in the "
                                      "run file, gives held-out data)");
      }
    }
  }
  if (from_flag("format", "data.format")) {
    const std::string f = absl::GetFlag(FLAGS_format);
    auto parsed = ParseTokenFormat(f);
    if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat("--", parsed.status().message()));
    config::TokenFormat value = config::FORMAT_AUTO;
    config::TokenFormat_Parse(absl::AsciiStrToUpper(f), &value);
    run.mutable_data()->set_format(value);
  }
  if (from_flag("precision", "precision")) {
    const std::string p = absl::GetFlag(FLAGS_precision);
    config::RunConfig::Precision value;
    if (!config::RunConfig::Precision_Parse(absl::AsciiStrToUpper(p), &value) || value == config::RunConfig::PRECISION_UNSPECIFIED) {
      return absl::InvalidArgumentError(absl::StrCat("--precision=", p, ": expected fp32, bf16 or fp16"));
    }
    run.set_precision(value);
  }
  if (run.model().empty() && !run.has_model_config()) {
    if (source->file.empty()) return absl::InvalidArgumentError("--config: required (a run file; or --model=NAME)");
    return absl::InvalidArgumentError(
        absl::StrCat("--config=", source->file, ": names no model (set model or model_config, or give --model=NAME)"));
  }
  if (run.run_dir().empty()) return absl::InvalidArgumentError("--run_dir: required (or run_dir in --config)");
  // Inside another run's checkpoints/ (or inside a checkpoint), that run's retention would
  // delete this one unsaid. A directory named checkpoints counts where its parent is a run.
  {
    std::error_code ec;
    const std::filesystem::path dir = EnclosingCheckpointDirectory(
        std::filesystem::weakly_canonical(run.run_dir(), ec), /*checkpoints_of_a_run=*/true);
    if (!dir.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--run_dir=", run.run_dir(), " lies inside the checkpoint directory ",
                                                     dir.string(),
                                                     ": its retention would delete this run; choose a path outside it"));
    }
  }
  // A directory of token shards (prepare's train_NNNNNN.bin and val_NNNNNN.bin, llm.c's
  // fineweb_train_NNNNNN.bin) is data, not a run's: the run's files went among the shards
  // with a warning, and a later prepare into it replaced them all.
  // A run made there before this check (its run.json exists) still resumes, said at start:
  // a requeued job must not fail for where an older version let it start.
  if (const std::string shard = PreparedShardIn(run.run_dir()); !shard.empty()) {
    std::error_code ec;
    if (!std::filesystem::exists(std::filesystem::path(run.run_dir()) / "run.json", ec)) {
      return absl::InvalidArgumentError(absl::StrCat("--run_dir=", run.run_dir(), " holds prepared token data (", shard,
                                                     "): give the run a directory of its own (the data goes in --data)"));
    }
    *start_warning = absl::StrCat(start_warning->empty() ? "" : absl::StrCat(*start_warning, "; "), "--run_dir=",
                                  run.run_dir(), " holds prepared token data (", shard,
                                  ") beside this run's files: new runs are refused there; move the run's files "
                                  "(run.json, metrics.jsonl, checkpoints/, ...) into a directory of its own");
  }
  if (run.data().train_shards().empty() && run.data().sources().empty()) {
    return absl::InvalidArgumentError("--data: required (or data.train_shards or data.sources in --config)");
  }
  ApplyRunDefaults(&run);
  return run;
}

// A run directory this process created and that holds nothing a later run needs (no
// metrics line, no checkpoint) is removed when the run fails before its first step
// (bad data found at the first window, a model that does not fit): a corrected
// command then starts clean, and nothing of value is lost. A directory that existed
// before is never touched.
// `created` is the highest directory of the path that this process made (run_dir itself,
// or an ancestor such as `a` of `--run_dir=a/b/c` when a and a/b were new too): the
// ancestors between run_dir and it are removed as well, each only if empty.
void RemoveUnusedRunDir(const std::string& run_dir, const std::filesystem::path& created) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path root(run_dir);
  if (fs::exists(root / "metrics.jsonl", ec)) return;
  if (fs::exists(root / "checkpoints", ec) && !fs::is_empty(root / "checkpoints", ec)) return;
  if (ec) return;
  fs::remove_all(root, ec);
  if (ec || fs::exists(root, ec)) return;
  RemoveCreatedDirs(run_dir, created);
}

// What the ranks of one job must agree on (trainer/run_agreement.h): the run file after
// its flags, every field of the model as resolved, the layout, the device, transport and
// --device_memory flags, the step's precision on a CPU (bf16 falls back to fp32 per rank's
// path), --restart and --allow_data_change, and each data source as opened (token count,
// fingerprint and weight: another file at the same path shows; the same files at other
// paths on other nodes are fine).
std::vector<std::pair<std::string, std::string>> AgreementFields(const config::RunConfig& run, const ModelDims& d,
                                                                 const ProcessGrid& grid, const Trainer::Sources& sources,
                                                                 Device device) {
  auto fields = RunConfigFields(run);
  for (auto& field : ModelAgreementFields(d)) fields.push_back(std::move(field));
  fields.emplace_back("the layout", absl::StrCat("tp ", grid.shape().tp, ", pp ", grid.shape().pp, ", dp ",
                                                 grid.shape().dp));
  fields.emplace_back("--device", absl::GetFlag(FLAGS_device));
  // What the step computes in on this rank: a bf16 run on the CPU runs bf16 only where the
  // rank's kernel path has the bf16 dot products (--isa, the CPU), fp32 elsewhere; ranks
  // that differ would train different models, each believing the run's precision.
  const bool cpu_bf16 = device == Device::kCpu && run.precision() == config::RunConfig::BF16;
  fields.emplace_back("the step's precision (bf16 on the CPU needs the avx512 path with AVX512_BF16)",
                      !cpu_bf16 ? "as the run file says"
                      : CpuStepPrecision(Precision::kBf16, nullptr) == Precision::kBf16
                          ? "bf16"
                          : absl::StrCat("fp32: no bf16 dot products on the ", kernels::cpu::IsaName(kernels::cpu::ActiveIsa()),
                                         " path of this CPU"));
  fields.emplace_back("--comm", absl::GetFlag(FLAGS_comm));
  fields.emplace_back("--device_memory", absl::GetFlag(FLAGS_device_memory));  // rank 0's decided the fit check
  // What the ranks do with the run directory's checkpoints (resume, restart, accept other data).
  fields.emplace_back("--restart", absl::GetFlag(FLAGS_restart) ? "true" : "false");
  fields.emplace_back("--allow_data_change", absl::GetFlag(FLAGS_allow_data_change) ? "true" : "false");
  auto describe = [](const std::string& name, const TokenStream* stream) {
    return stream == nullptr ? absl::StrCat(name, ": none")
                             : absl::StrCat(name, ": ", stream->size(), " tokens, fingerprint ", stream->Fingerprint());
  };
  std::vector<std::string> data{describe("train", sources.train.get()), describe("validation", sources.val.get())};
  for (const LoaderSource& s : sources.mixture) {
    data.push_back(absl::StrCat(describe(s.name, s.stream.get()), ", weight ", s.weight));
  }
  for (const LoaderSource& s : sources.val_sources) data.push_back(describe("validation " + s.name, s.stream.get()));
  fields.emplace_back("the data as opened", absl::StrJoin(data, "; "));
  return fields;
}

// --collective_timeout as the command line gives it (the last one, as absl takes it), read
// before MPI_Init and the flags' parse for the watchdogs that start with MPI (issue 43 §2).
// Plain arguments only: a --flagfile, like the run file, may sit on a hung file system and
// is read under the watch. The default 600 s where absent, or not a value the parse will
// accept (it says why).
double CommandLineCollectiveTimeout(int argc, char** argv) {
  double seconds = 600;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (absl::StartsWith(arg, "--")) arg.remove_prefix(1);
    if (!absl::ConsumePrefix(&arg, "-collective_timeout")) continue;
    absl::string_view value;
    if (absl::ConsumePrefix(&arg, "=")) {
      value = arg;
    } else if (arg.empty() && i + 1 < argc) {
      value = argv[++i];
    } else {
      continue;
    }
    double v = 0;
    seconds = absl::SimpleAtod(value, &v) && v >= 1 && v <= 1e7 ? v : 600;
  }
  return seconds;
}

}  // namespace

int TrainCommand(int argc, char** argv) {
  // Caught from the first instant: a preemption signal during start-up (MPI,
  // loading a checkpoint) then stops the run after its first step instead of
  // killing the process without a checkpoint.
  InstallStopHandlers();
  // Under mpirun / srun every rank runs this; alone, the grid is one process. MPI first,
  // so that an error in the flags, the run file or the model, which every rank meets
  // alike, is reported once for the job by rank 0 (issue 31 §6).
  // Watched from MPI_Init on (issue 43 §2): a rank stopped, or hung reading its run file,
  // before the ranks agree on the run ends the job naming it, at the command line's
  // --collective_timeout until the run's is known.
  std::unique_ptr<MpiSession> mpi;
  if (LaunchedByMpi()) {
    auto session = MpiSession::Init(&argc, &argv, {.seconds = CommandLineCollectiveTimeout(argc, argv)});
    if (!session.ok()) return Fail("train", session.status());
    mpi = std::move(*session);
  }
  absl::StatusOr<CommKind> comm = CommKind::kAuto;
  absl::StatusOr<config::RunConfig> run;
  absl::StatusOr<ModelDims> dims;
  RunSource source;  // where each field came from, for ValidateRun's messages
  std::string start_warning;  // BuildRun's, said with the start lines
  int64_t device_memory = 0;  // --device_memory in bytes; 0: the device's own total
  const absl::Status prepared = [&]() -> absl::Status {
    MS_RETURN_IF_ERROR(ParseFlags(argc, argv, "multiscreen train --config=FILE [--run_dir=DIR --data=DIR --steps=N ...]",
                                  {"config", "run_dir", "data", "steps", "seed", "micro_batch", "grad_accum", "seq_len",
                                   "lr", "precision", "checkpoint_every", "eval_every", "eval_windows", "model", "tp", "pp", "zero",
                                   "threads", "isa", "restart", "device", "comm", "format", "allow_data_change",
                                   "dp_overlap", "dp_bucket_mb", "collective_timeout", "peak_tflops", "device_memory"}));
    comm = ParseCommKind(absl::GetFlag(FLAGS_comm));
    MS_RETURN_IF_ERROR(comm.status());
    MS_RETURN_IF_ERROR(ApplyThreadsFlag());
    MS_RETURN_IF_ERROR(ApplyIsaFlag());
    MS_RETURN_IF_ERROR(PeakTflops().status());
    MS_ASSIGN_OR_RETURN(device_memory, DeviceMemoryFlag());
    run = BuildRun(GivenFlags(argc, argv), &source, &start_warning);
    MS_RETURN_IF_ERROR(run.status());
    dims = run->model().empty() ? ResolveModel(run->model_config(),
                                               absl::StrCat("--config=", absl::GetFlag(FLAGS_config),
                                                            ": model_config (or --model)"))
                                : LoadModel(run->model());
    MS_RETURN_IF_ERROR(dims.status());
    // Every field against its schema before anything is sized from it; errors name
    // the run file, or the flag that set the field.
    return ValidateRun(*run, *dims, source);
  }();
  if (mpi != nullptr) {
    auto world = MpiCommunicator::Duplicate(MPI_COMM_WORLD);
    if (auto s = AgreeOnError(*world, prepared, /*name_rank=*/true); !s.ok()) return world->rank() == 0 ? Fail("train", s) : 1;
  } else if (!prepared.ok()) {
    return Fail("train", prepared);
  }
  std::unique_ptr<ProcessGrid> grid;
  std::string bound_device;  // BindDevice's answer: "cuda:N (name)" or "cpu"
  // --device=cpu binds no GPU (cudaSetDevice would open a context on one, for nothing).
  const bool cpu_asked = absl::AsciiStrToLower(absl::GetFlag(FLAGS_device)) == "cpu";
  if (mpi != nullptr) {
    if (auto s = CheckLauncherProcessCount(mpi->world_size()); !s.ok()) return Fail("train", s);
    // The run's limit from here (its run file's collective_timeout_s, or the flag).
    const double timeout = run->parallel().collective_timeout_s();
    mpi->SetCollectiveTimeout({.seconds = timeout > 0 ? timeout : 600});
    // A layout the job's size cannot hold, or a GPU a rank cannot bind, is met by every
    // rank at the same point (no collective inside either that a failing rank could leave
    // the others waiting in): agreed, so that what every rank met is said once, by rank 0,
    // and one rank's own failure once, naming it; every rank then exits 1 (MPI_Finalize),
    // never MPI_Abort with a line per rank.
    auto made = ProcessGrid::Create(int(run->parallel().tp()), int(run->parallel().pp()));
    {
      auto world = MpiCommunicator::Duplicate(MPI_COMM_WORLD);
      if (auto s = AgreeOnError(*world, made.status(), /*name_rank=*/true); !s.ok()) {
        return world->rank() == 0 ? Fail("train", s) : 1;
      }
    }
    grid = std::move(*made);
    SetFatalContext(grid->Describe());
    auto bound = cpu_asked ? absl::StatusOr<std::string>("cpu") : BindDevice(grid->local_rank());
    if (auto s = AgreeOnError(grid->world(), bound.status(), /*name_rank=*/true); !s.ok()) {
      return grid->world_rank() == 0 ? Fail("train", s) : 1;
    }
    bound_device = *bound;
    if (grid->world_rank() == 0) LogInfo("process grid: ", grid->world_size(), " ranks, tp=", grid->shape().tp,
                                         " pp=", grid->shape().pp, " dp=", grid->shape().dp, "; ", grid->Describe());
    // eval.windows against dp, now known: every rank alike, one line, before any file is made.
    if (const int64_t w = run->eval().windows(); w > 0 && w % grid->shape().dp != 0) {
      return grid->world_rank() == 0
                 ? Fail("train", absl::InvalidArgumentError(absl::StrCat(
                                     source.Name("eval.windows"), ": ", w, " is not a multiple of dp = ",
                                     grid->shape().dp, " (each replica takes an equal block of the held-out windows)")))
                 : 1;
    }
  } else {
    // `srun -n 2 --mpi=none` lands here twice: say so before the run directory is touched.
    if (auto s = CheckLauncherProcessCount(1); !s.ok()) return Fail("train", s);
    if (run->parallel().tp() * run->parallel().pp() != 1) {
      return Fail("train", absl::InvalidArgumentError(absl::StrCat(
                               "--tp=", run->parallel().tp(), " --pp=", run->parallel().pp(),
                               " needs tp·pp·dp processes: start it under mpirun -np N or srun --mpi=pmix")));
    }
    grid = ProcessGrid::Single();
    auto bound = cpu_asked ? absl::StatusOr<std::string>("cpu") : BindDevice(0);
    if (!bound.ok()) return Fail("train", bound.status());
    bound_device = *bound;
  }
  const bool logger = grid->world_rank() == 0;
  if (logger && run->parallel().zero() > 0 && grid->shape().dp == 1) {
    // ZeRO-1 shards AdamW's moments over the data-parallel ranks: with one there is nothing to shard.
    LogWarning("train: zero=", run->parallel().zero(), " (--zero or parallel.zero) has no effect with dp = 1 (tp=", grid->shape().tp,
               " pp=", grid->shape().pp, "): every rank holds its whole optimizer state");
  }
  // Under MPI an error on any rank ends the whole job (never a hang); one that
  // every rank returned alike is reported once, by rank 0, and every rank exits.
  auto fail = [&](const absl::Status& status) {
    if (IsAgreedError(status)) return logger ? Fail("train", status) : 1;
    if (mpi != nullptr) AbortJobIfError(status);
    return Fail("train", status);
  };
  // Single-process runs clean up a run directory they created and never used (under
  // MPI a failing rank ends the job at once, and the directory stays).
  const std::filesystem::path created_dir = mpi == nullptr ? FirstMissingDir(run->run_dir()) : std::filesystem::path();
  const bool fresh_run_dir = !created_dir.empty();
  auto fail_before_first_step = [&](const absl::Status& status) {
    if (fresh_run_dir) RemoveUnusedRunDir(run->run_dir(), created_dir);
    return fail(status);
  };
  // A GPU too small for the run is one line naming the flags, from the first allocation
  // there (a kernel table's GEMM workspace) to the activations of --micro_batch x --seq_len.
  OnDeviceOutOfMemory("train",
                      "lower --micro_batch (raise --grad_accum to keep the batch) or --seq_len, or shard the model "
                      "over more GPUs (--tp, --pp; --zero=1 shards AdamW's moments over dp)",
                      [fresh_run_dir, run_dir = run->run_dir(), created_dir] {
                        if (fresh_run_dir) RemoveUnusedRunDir(run_dir, created_dir);
                      });
  // Every rank resolves its own device (its GPU was bound above); the step runs there.
  auto device = ResolveDevice(false);
  if (device.ok() && *device == Device::kCpu && device_memory > 0) {  // it would be ignored: say so
    device = absl::InvalidArgumentError(absl::StrCat("--device_memory=", absl::GetFlag(FLAGS_device_memory),
                                                     " sizes a GPU for the fit check of --device=cuda; this run's "
                                                     "step runs on the cpu"));
  }
  if (mpi != nullptr) {
    // --device that no rank can serve (tpu; cuda without a GPU) is met by every rank alike: said once.
    if (auto s = AgreeOnError(grid->world(), device.status(), /*name_rank=*/true); !s.ok()) return fail(MarkAgreed(s));
  }
  if (!device.ok()) return fail(device.status());
  // Each rank's start line names the device its step runs on: the GPU it bound, or the
  // CPU (a field report: --device=cpu ranks said "device cuda:0 (Emulated ...)").
  if (mpi != nullptr) {
    LogInfo(grid->Describe(), ", device ", *device == Device::kCpu ? "cpu" : bound_device, "; launcher: ", LauncherEnv());
  }
  // Up front, before the data or a checkpoint is read (issue 45): the layout's modelled
  // device memory per rank (the plan's, tools/plan_memory.py, by rank 0 for every rank:
  // the ranks of a layout differ only in their stage, and the plan takes the one that holds
  // the most) against the GPU's total or --device_memory; a layout that cannot fit is
  // refused on every rank at once, with the plan's breakdown and the nearest layouts that fit.
  if (*device == Device::kCuda) {
    FitVerdict fit;
    // Without --device_memory the layout must fit the smallest GPU of the job: every rank
    // reads its own total and rank 0 checks against the least (named when it is not its own).
    int64_t bytes = device_memory;
    std::string bytes_source = "--device_memory";
    if (bytes <= 0) {
      bytes = CurrentDeviceMemory().total;
      bytes_source = "cudaMemGetInfo's total";
      if (mpi != nullptr && grid->world_size() > 1) {
        const int64_t own = bytes;
        double least = -static_cast<double>(own);  // max of the negatives: the least total
        grid->world().AllReduce(&least, 1, ReduceOp::kMax);
        bytes = static_cast<int64_t>(-least);
        double holder = bytes == own ? -static_cast<double>(grid->world_rank()) : -1e18;  // lowest rank holding it
        grid->world().AllReduce(&holder, 1, ReduceOp::kMax);
        if (bytes != own || holder != 0) {
          bytes_source = absl::StrCat("the smallest GPU's total (rank ", static_cast<int64_t>(-holder), ")");
        }
      }
    }
    if (logger) {
      if (bytes > 0) {
        fit = CheckLayoutFits(*dims,
                              {.tp = grid->shape().tp,
                               .pp = grid->shape().pp,
                               .dp = grid->shape().dp,
                               .zero = run->parallel().zero() > 0 && grid->shape().dp > 1 ? 1 : 0,
                               .micro_batch = run->micro_batch(),
                               .grad_accum = run->grad_accum(),
                               .seq_len = run->seq_len(),
                               .precision = absl::AsciiStrToLower(config::RunConfig::Precision_Name(run->precision())),
                               .gpus_per_node = std::max(1, grid->local_size())},
                              bytes, bound_device, bytes_source);
        if (!fit.warning.empty()) LogWarning("train: ", fit.warning);
        if (!fit.status.ok()) {
          for (const std::string& line : fit.breakdown) LogInfo(line);
        }
      }
    }
    if (mpi != nullptr) {
      if (auto s = AgreeOnError(grid->world(), fit.status, /*name_rank=*/false); !s.ok()) return fail(MarkAgreed(s));
    } else if (!fit.status.ok()) {
      return fail_before_first_step(fit.status);
    }
  }
  auto sources = OpenRunData(*run, source, logger);
  if (mpi != nullptr) {
    // A missing or bad --data is met by every rank alike, or by the ranks of one node: said once.
    if (auto s = AgreeOnError(grid->world(), sources.status(), /*name_rank=*/true); !s.ok()) return fail(MarkAgreed(s));
  }
  if (!sources.ok()) return fail(sources.status());
  // Every rank starts the same run (issue 31 §1), compared before the first collective
  // whose length depends on it: one line names the field that differs.
  if (mpi != nullptr) {
    if (auto s = AgreeOnRun(grid->world(), AgreementFields(*run, *dims, *grid, *sources, *device)); !s.ok()) {
      return fail(MarkAgreed(s));
    }
  }
  // The groups' transport for that device (a collective: NCCL communicators are made here).
  if (auto s = grid->UseStepDevice(*device, *comm); !s.ok()) return fail(s);
  auto trainer = Trainer::Create(*run, *dims, *std::move(sources), grid.get(),
                                 {.restart = absl::GetFlag(FLAGS_restart),
                                  .device = *device,
                                  .allow_data_change = absl::GetFlag(FLAGS_allow_data_change),
                                  .peak_tflops = absl::GetFlag(FLAGS_peak_tflops)});
  if (!trainer.ok()) return fail_before_first_step(trainer.status());
  // data.json as it was, so that a start that fails before its first step leaves a run
  // directory that existed as it found it (RecordRunData may raise max_seq_len).
  const std::filesystem::path data_json = std::filesystem::path(run->run_dir()) / "data.json";
  std::optional<std::string> data_json_before;
  if (std::ifstream in(data_json, std::ios::binary); in) {
    data_json_before = std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (logger) RecordRunData(*run);
  if (logger) {
    // Which transport the groups use, on the device line (one process has none).
    const std::string comm_note =
        grid->world_size() > 1 ? absl::StrCat("; comm: ", CommKindName(grid->comm_kind()), " (--comm=",
                                              absl::GetFlag(FLAGS_comm), ")")
                               : "";
    if (!start_warning.empty()) LogWarning(start_warning);
    LogInfo("training ", dims->name, " for ", run->steps(), " steps of ", grid->shape().dp, " x ", run->grad_accum(),
            " x ", run->micro_batch(), " x ", run->seq_len(), " tokens into ", run->run_dir(), "; build ",
            BuildDescription());
    if (*device == Device::kCpu) {
      // The precision the step computes in (run.json's effective_precision), and the one
      // asked for where the CPU path falls back.
      const Precision step = (*trainer)->step_precision();
      const bool falls_back = run->precision() == config::RunConfig::BF16 && step != Precision::kBf16;
      LogInfo("device: cpu; CPU kernels: ", kernels::cpu::IsaDescription(), "; step precision: ", PrecisionName(step),
              falls_back ? " (--precision=bf16 falls back)" : "", "; head: ",
              HeadPathName<float>(*dims, grid->shape().tp, HeadPath::kPanels,
                                  step == Precision::kBf16 ? Precision::kBf16 : Precision::kFp32),
              comm_note);
    } else {
      LogInfo("device: ", DeviceName(*device), " (", bound_device,
              "): the step, parameters, gradients and AdamW on the GPU; checkpoints staged through the host",
              comm_note);
    }
  }
  if (auto s = (*trainer)->Run(); !s.ok()) {
    if ((*trainer)->steps_run() > 0) return fail(s);
    trainer->reset();  // closes the run's files (lock, TensorBoard) before the removal
    if (logger && !fresh_run_dir) {
      std::error_code ec;
      if (data_json_before.has_value()) {
        std::ofstream(data_json, std::ios::binary | std::ios::trunc) << *data_json_before;
      } else {
        std::filesystem::remove(data_json, ec);
      }
    }
    return fail_before_first_step(s);
  }
  // Each rank's device peak (the arrays its step held at once: kernels/buffer.h BufferBytesPeak),
  // what `multiscreen plan` models for the layout (tools/plan_memory.py).
  if (*device == Device::kCuda) {
    LogInfo(grid->Describe(), ": peak device memory ", BufferBytesPeak(Device::kCuda), " bytes (the step's arrays)");
  }
  if (logger && (*trainer)->steps_run() > 0) {
    std::printf("final train_loss %.4f", (*trainer)->last_loss());
    std::printf(" (step %lld)", static_cast<long long>((*trainer)->state().step));
    if ((*trainer)->last_val_loss() > 0) {
      std::printf(" val_loss %.4f (step %lld)", (*trainer)->last_val_loss(),
                  static_cast<long long>((*trainer)->last_val_step()));
    }
    for (const auto& [name, loss] : (*trainer)->last_val_losses()) std::printf(" val_loss/%s %.4f", name.c_str(), loss);
    std::printf("\n");
  }
  return 0;
}

}  // namespace multiscreen::cli
