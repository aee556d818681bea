// `multiscreen ckpt plan|init|reshard|export|inspect`: checkpoint tools (issues 6, 20).
//   plan    --model=psi64 --tp=8 --pp=8 [--dp=N] [--zero=1]  file sizes, without allocating the model
//   init    --model=M --seed=S --tp --pp [--dp --zero] --out=RUN_DIR   the step-0 checkpoint of a layout
//   reshard --checkpoint=DIR --tp --pp [--dp --zero] --out=RUN_DIR     the same checkpoint in another layout
//   export  --checkpoint=DIR --out=FILE.h5                   the consolidated weights file
//   inspect --checkpoint=DIR                                  step, model sizes and switches, layout, checksum status
// init, reshard and export stream (checkpoint/streamed_write.h): memory stays
// under --memory (default 1G) whatever the model, and they end by logging the
// peak resident memory (VmHWM). SIGINT / SIGTERM while they write (trainer/stop_signal.h,
// as in prepare) stop them between blocks: the unfinished FILE.h5.tmp or RUN_DIR removed,
// an existing FILE.h5 left as it was, exit 1.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <string>
#include <string_view>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/read_retry.h"
#include "checkpoint/streamed_write.h"
#include "checkpoint/weights_file.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/memory_bound.h"
#include "cli/weights_source.h"
#include "common/config.h"
#include "common/log.h"
#include "common/status.h"
#include "trainer/stop_signal.h"

ABSL_FLAG(int64_t, dp, 1, "data-parallel degree (ckpt plan, init, reshard)");

ABSL_DECLARE_FLAG(std::string, checkpoint);
ABSL_DECLARE_FLAG(int64_t, tp);
ABSL_DECLARE_FLAG(int64_t, pp);
ABSL_DECLARE_FLAG(int64_t, zero);

namespace multiscreen::cli {
namespace {

std::string Gib(int64_t bytes) { return absl::StrFormat("%.3f GiB", double(bytes) / (1024.0 * 1024 * 1024)); }

// The layout --tp, --pp, --dp, --zero give, refused unless tp divides N_H and pp N_L.
absl::StatusOr<ParallelLayout> LayoutFromFlags(const ModelDims& dims) {
  ParallelLayout layout{absl::GetFlag(FLAGS_tp), absl::GetFlag(FLAGS_pp), absl::GetFlag(FLAGS_dp), absl::GetFlag(FLAGS_zero)};
  // A degree below 1 first: "--tp=-2 does not divide N_H = 4" would be untrue.
  if (layout.tp < 1) return absl::InvalidArgumentError(absl::StrCat("--tp=", layout.tp, ": must be >= 1"));
  if (layout.pp < 1) return absl::InvalidArgumentError(absl::StrCat("--pp=", layout.pp, ": must be >= 1"));
  if (dims.n_heads % layout.tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--tp=", layout.tp, " does not divide N_H = ", dims.n_heads, " of ", dims.name));
  }
  if (dims.n_layers % layout.pp != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--pp=", layout.pp, " does not divide N_L = ", dims.n_layers, " of ", dims.name));
  }
  if (layout.dp < 1 || layout.dp > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("--dp=", layout.dp, ": must be in [1, 2^20]"));
  }
  if (layout.zero != 0 && layout.zero != 1) {
    return absl::InvalidArgumentError(absl::StrCat("--zero=", layout.zero, ": expected 0 or 1"));
  }
  return layout;
}

int Plan() {
  auto dims = LoadModel(absl::GetFlag(FLAGS_model));
  if (!dims.ok()) return Fail("ckpt plan", dims.status());
  auto given = LayoutFromFlags(*dims);
  if (!given.ok()) return Fail("ckpt plan", given.status());
  const ParallelLayout layout = *given;
  int64_t weights = 0, moments = 0;
  std::printf("%-28s %16s %16s\n", "file", "weights", "adam m+v");
  for (const ShardPlan& s : PlanCheckpoint(*dims, layout)) {
    if (layout.zero) {
      // ZeRO-1: each dp rank writes the moments of its flat range (DataParallel's
      // ⌈size/dp⌉ split), the shard file holds the weights only.
      std::printf("%-28s %16lld %16s\n", s.file.c_str(), (long long)s.weight_bytes, "-");
      const int64_t elements = s.weight_bytes / int64_t(sizeof(float));
      const int64_t per_rank = (elements + layout.dp - 1) / layout.dp;
      for (int64_t d = 0; d < layout.dp; ++d) {
        const int64_t mine = std::max<int64_t>(0, std::min(elements, (d + 1) * per_rank) - d * per_rank);
        const int64_t bytes = 2 * mine * int64_t(sizeof(float));
        std::printf("  %-26s %16s %16lld\n", OptimizerFileName(s.pp_rank, s.tp_rank, d).c_str(), "-", (long long)bytes);
      }
    } else {
      std::printf("%-28s %16lld %16lld\n", s.file.c_str(), (long long)s.weight_bytes, (long long)s.moment_bytes);
    }
    weights += s.weight_bytes;
    moments += s.moment_bytes;
  }
  std::printf("total weights %lld bytes (%s), moments %lld bytes (%s), checkpoint %lld bytes (%s)\n",
              (long long)weights, Gib(weights).c_str(), (long long)moments, Gib(moments).c_str(),
              (long long)(weights + moments), Gib(weights + moments).c_str());
  return 0;
}

// --checkpoint, read by `read` (ReadCheckpointRetrying: a live run's pruning under the
// read starts it over on the newest checkpoint).
absl::StatusOr<CheckpointRef> ReadGiven(const std::function<absl::Status(const CheckpointRef&)>& read) {
  const std::string path = absl::GetFlag(FLAGS_checkpoint);
  if (path.empty()) return absl::InvalidArgumentError("--checkpoint: a checkpoint or run directory is required");
  return ReadCheckpointRetrying(path, read);
}

// --checkpoint verified (weights and moments, or the weights alone) and opened as a
// TensorSource: its files are held open, so the run's pruning after this returns
// does not reach the reads.
absl::StatusOr<CheckpointRef> OpenVerifiedSource(bool weights_only, TensorSource* source) {
  return ReadGiven([&](const CheckpointRef& ckpt) {
    MS_RETURN_IF_ERROR(CheckVerified(ckpt, weights_only));
    auto got = CheckpointSource(ckpt);
    if (!got.ok()) return got.status();
    *source = *std::move(got);
    return absl::OkStatus();
  });
}

// Whether directory `out` holds nothing but what a killed `ckpt init` or `ckpt reshard`
// leaves: checkpoints/ with only temporary step directories (.tmp-step_N) in it.
bool OnlyAKilledWritersTemporary(const std::string& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(out, ec) || fs::is_symlink(out, ec)) return false;
  int entries = 0;
  for (const auto& e : fs::directory_iterator(out, ec)) {
    if (++entries > 1 || e.path().filename() != "checkpoints" || !e.is_directory() || e.is_symlink()) return false;
  }
  if (ec || entries != 1) return false;
  int temporaries = 0;
  for (const auto& e : fs::directory_iterator(fs::path(out) / "checkpoints", ec)) {
    if (e.path().filename().string().rfind(".tmp-step_", 0) != 0 || !e.is_directory() || e.is_symlink()) return false;
    ++temporaries;
  }
  return !ec && temporaries > 0;
}

// --out for a new run directory: given, outside any checkpoint, not there yet. One
// that holds only a killed writer's temporary (OnlyAKilledWritersTemporary) is removed,
// so that the command can simply be run again.
absl::Status CheckNewRunDir(const std::string& out, const std::string& input) {
  if (out.empty()) return absl::InvalidArgumentError("--out: a new run directory is required");
  MS_RETURN_IF_ERROR(CheckOutputPath("out", out, {input}));
  std::error_code ec;
  if (OnlyAKilledWritersTemporary(out)) {
    std::filesystem::remove_all(out, ec);
    if (ec) return absl::PermissionDeniedError(absl::StrCat("--out=", out, ": cannot remove the unfinished checkpoint a "
                                                            "killed run left there: ", ec.message()));
    LogWarning("--out=", out, ": removed the unfinished checkpoint (checkpoints/.tmp-step_*) a killed run left there");
  }
  if (std::filesystem::exists(out, ec)) {
    return absl::AlreadyExistsError(absl::StrCat("--out=", out, " exists: choose a new directory (nothing is written over)"));
  }
  return absl::OkStatus();
}

// Writes the checkpoint into the new run directory `out`, removing it again on failure.
int WriteNewRun(const char* command, const std::string& out, const CheckpointMeta& meta, const TensorSource& source,
                int64_t bound) {
  const auto start = std::chrono::steady_clock::now();
  InstallStopHandlers();  // only now: a signal during the checks or the verification ends the command at once
  auto dir = WriteCheckpointStreamed(out, meta, source, BlockBytes(bound), [] { return StopRequested(); });
  if (!dir.ok()) {
    std::error_code ec;
    std::filesystem::remove_all(out, ec);
    return Fail(command, dir.status());
  }
  LogInfo("wrote ", *dir, ": ", meta.dims.name, " step ", meta.step, " for tp=", meta.layout.tp, " pp=", meta.layout.pp,
          " dp=", meta.layout.dp, " zero=", meta.layout.zero, " in ",
          absl::StrFormat("%.1fs", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
  ReportPeakMemory(command, bound);
  return 0;
}

int64_t WeightBytes(const ModelDims& dims, const ParallelLayout& layout) {
  int64_t bytes = 0;
  for (const ShardPlan& s : PlanCheckpoint(dims, layout)) bytes += s.weight_bytes;
  return bytes;
}

int InitCkpt() {
  const char* command = "ckpt init";
  const std::string out = absl::GetFlag(FLAGS_out);
  if (auto s = CheckNewRunDir(out, ""); !s.ok()) return Fail(command, s);
  auto bound = MemoryBoundBytes();
  if (!bound.ok()) return Fail(command, bound.status());
  auto dims = LoadModel(absl::GetFlag(FLAGS_model));
  if (!dims.ok()) return Fail(command, dims.status());
  auto layout = LayoutFromFlags(*dims);
  if (!layout.ok()) return Fail(command, layout.status());
  // The step-0 moments are zeros, left unwritten: the weights are what takes disk.
  if (auto s = CheckFreeDisk(out, WeightBytes(*dims, *layout)); !s.ok()) return Fail(command, s);
  CheckpointMeta meta;  // step 0: no samples, no Adam step, loss scale 1 (what train saves)
  meta.seed = absl::GetFlag(FLAGS_seed);
  meta.layout = *layout;
  meta.dims = *dims;
  const int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  return WriteNewRun(command, out, meta, InitSource(*dims, uint64_t(meta.seed), threads), *bound);
}

int Reshard() {
  const char* command = "ckpt reshard";
  const std::string out = absl::GetFlag(FLAGS_out);
  if (auto s = CheckNewRunDir(out, absl::GetFlag(FLAGS_checkpoint)); !s.ok()) return Fail(command, s);
  auto bound = MemoryBoundBytes();
  if (!bound.ok()) return Fail(command, bound.status());
  // Verified before anything is written (opened once: its warnings print once).
  TensorSource source;
  auto ckpt = OpenVerifiedSource(/*weights_only=*/false, &source);
  if (!ckpt.ok()) return Fail(command, ckpt.status());
  auto layout = LayoutFromFlags(ckpt->meta.dims);
  if (!layout.ok()) return Fail(command, layout.status());
  // The target's weights, and the moments as the source stores them (unwritten
  // zero blocks stay unwritten): the source's bytes beyond its own weights.
  int64_t stored = 0;
  for (const auto& [file, record] : ckpt->manifest["files"].items()) stored += record["bytes"].get<int64_t>();
  const int64_t needed = WeightBytes(ckpt->meta.dims, *layout) +
                         std::max<int64_t>(0, stored - WeightBytes(ckpt->meta.dims, ckpt->meta.layout));
  if (auto s = CheckFreeDisk(out, needed); !s.ok()) return Fail(command, s);
  CheckpointMeta meta = ckpt->meta;
  meta.layout = *layout;
  return WriteNewRun(command, out, meta, source, *bound);
}

int Export() {
  const char* command = "ckpt export";
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return Fail(command, absl::InvalidArgumentError("--out: an output .h5 path is required"));
  if (auto s = CheckOutputFile("out", out, {absl::GetFlag(FLAGS_checkpoint)}); !s.ok()) return Fail(command, s);
  auto bound = MemoryBoundBytes();
  if (!bound.ok()) return Fail(command, bound.status());
  TensorSource source;
  auto ckpt = OpenVerifiedSource(/*weights_only=*/true, &source);
  if (!ckpt.ok()) return Fail(command, ckpt.status());
  if (auto s = CheckFreeDisk(out, 4 * CountParams(ckpt->meta.dims).total); !s.ok()) return Fail(command, s);
  InstallStopHandlers();  // only now: a signal during the verification ends export at once
  if (auto s = WriteWeightsStreamed(out, ckpt->meta.dims, source, BlockBytes(*bound), [] { return StopRequested(); });
      !s.ok()) {
    return Fail(command, s);
  }
  LogInfo("exported ", ckpt->dir, " (step ", ckpt->meta.step, ") to ", out);
  ReportPeakMemory(command, *bound);
  return 0;
}

int Inspect() {
  // A corrupt checkpoint is listed with its problems; one that fails only because the
  // run pruned it while it was read is read again on the newest.
  std::vector<std::string> problems;
  auto ckpt = ReadGiven([&](const CheckpointRef& ckpt) {
    problems = VerifyCheckpoint(ckpt);
    return problems.empty() || !CheckpointVanished(ckpt) ? absl::OkStatus()
                                                        : absl::DataLossError(problems.front());
  });
  if (!ckpt.ok()) return Fail("ckpt inspect", ckpt.status());
  const CheckpointMeta& m = ckpt->meta;
  std::printf("checkpoint %s\n  model %s, step %lld, samples %lld, tokens %lld, adam step %lld\n", ckpt->dir.c_str(),
              m.dims.name.c_str(), (long long)m.step, (long long)m.samples, (long long)m.tokens, (long long)m.adam_step);
  // The model's sizes and every switch its family has (attention, position, output_gate, ...).
  std::string fields;
  for (const ModelField& f : ModelFields(m.dims)) {
    if (std::string_view(f.name) != "family" && f.applies) absl::StrAppend(&fields, " ", f.name, "=", f.value);
  }
  std::printf("  family %s:%s\n", FamilyName(m.dims.family), fields.c_str());
  // The build that wrote it (manifests before issue 43 do not say).
  std::printf("  written by %s\n", m.build.version.empty() ? "a build that did not record itself"
                                                             : absl::StrCat("multiscreen ", m.build.version, " (",
                                                                            m.build.commit, ")").c_str());
  std::printf("  layout tp=%lld pp=%lld dp=%lld zero=%lld, loss scale %g\n", (long long)m.layout.tp, (long long)m.layout.pp,
              (long long)m.layout.dp, (long long)m.layout.zero, m.loss_scale);
  int64_t total = 0;
  for (const auto& [file, record] : ckpt->manifest["files"].items()) {
    std::printf("  %-24s %12lld bytes, %zu datasets\n", file.c_str(), (long long)record["bytes"].get<int64_t>(),
                record["datasets"].size());
    total += record["bytes"].get<int64_t>();
  }
  std::printf("  total %lld bytes; checksums: %s\n", (long long)total, problems.empty() ? "all OK" : "FAILED");
  for (const std::string& p : problems) std::printf("    %s\n", p.c_str());
  if (problems.empty()) return 0;
  std::fflush(stdout);
  return Fail("ckpt inspect", absl::DataLossError(absl::StrCat(ckpt->dir, ": ", problems.size(), " dataset",
                                                               problems.size() == 1 ? "" : "s",
                                                               " fail verification, first: ", problems.front())));
}

}  // namespace

int CkptCommand(int argc, char** argv) {
  const char* usage = "multiscreen ckpt plan|init|reshard|export|inspect [--flags]";
  const char* expected = "plan, init, reshard, export or inspect";
  if (argc < 2) return Fail("ckpt", absl::InvalidArgumentError(absl::StrCat("expected a subcommand: ", expected)));
  const std::string sub = argv[1];
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::printf("usage: multiscreen ckpt plan --model=M --tp=N --pp=N [--dp=N --zero=1]\n"
                "       multiscreen ckpt init --model=M --seed=S --tp=N --pp=N [--dp=N --zero=1] --out=RUN_DIR [--memory=1G]\n"
                "       multiscreen ckpt reshard --checkpoint=DIR --tp=N --pp=N [--dp=N --zero=1] --out=RUN_DIR [--memory=1G]\n"
                "       multiscreen ckpt export --checkpoint=DIR --out=FILE.h5 [--memory=1G]\n"
                "       multiscreen ckpt inspect --checkpoint=DIR\n");
    return 0;
  }
  // Each subcommand with the flags it takes.
  int (*run)() = nullptr;
  absl::Status parsed;
  if (sub == "plan") {
    run = Plan;
    parsed = ParseFlags(argc - 1, argv + 1, usage, {"model", "tp", "pp", "dp", "zero"});
  } else if (sub == "init") {
    run = InitCkpt;
    parsed = ParseFlags(argc - 1, argv + 1, usage, {"model", "seed", "tp", "pp", "dp", "zero", "out", "memory"});
  } else if (sub == "reshard") {
    run = Reshard;
    parsed = ParseFlags(argc - 1, argv + 1, usage, {"checkpoint", "tp", "pp", "dp", "zero", "out", "memory"});
  } else if (sub == "export") {
    run = Export;
    parsed = ParseFlags(argc - 1, argv + 1, usage, {"checkpoint", "out", "memory"});
  } else if (sub == "inspect") {
    run = Inspect;
    parsed = ParseFlags(argc - 1, argv + 1, usage, {"checkpoint"});
  } else {
    return Fail("ckpt", absl::InvalidArgumentError(absl::StrCat("unknown subcommand '", sub, "': expected ", expected)));
  }
  if (!parsed.ok()) return Fail(absl::StrCat("ckpt ", sub).c_str(), parsed);
  // One process: under `mpirun -n 2` every rank wrote the same --out (ckpt init, reshard, export).
  if (int rc = RefuseSeveralProcesses("ckpt"); rc != 0) return rc;
  return run();
}

}  // namespace multiscreen::cli
