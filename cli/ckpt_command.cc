// `multiscreen ckpt plan|export|inspect`: checkpoint tools (issue 6).
//   plan    --model=psi64 --tp=8 --pp=8 [--dp=N] [--zero=1]  file sizes, without allocating the model
//   export  --checkpoint=DIR --out=FILE.h5                   the consolidated weights file
//   inspect --checkpoint=DIR                                  step, layout, sizes, checksum status
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/weights_file.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/log.h"

ABSL_FLAG(int64_t, dp, 1, "data-parallel degree (ckpt plan)");

ABSL_DECLARE_FLAG(std::string, checkpoint);
ABSL_DECLARE_FLAG(int64_t, tp);
ABSL_DECLARE_FLAG(int64_t, pp);
ABSL_DECLARE_FLAG(int64_t, zero);

namespace multiscreen::cli {
namespace {

std::string Gib(int64_t bytes) { return absl::StrFormat("%.3f GiB", double(bytes) / (1024.0 * 1024 * 1024)); }

int Plan() {
  auto dims = LoadModel(absl::GetFlag(FLAGS_model));
  if (!dims.ok()) return Fail("ckpt plan", dims.status());
  ParallelLayout layout{absl::GetFlag(FLAGS_tp), absl::GetFlag(FLAGS_pp), absl::GetFlag(FLAGS_dp), absl::GetFlag(FLAGS_zero)};
  if (layout.tp < 1 || dims->n_heads % layout.tp != 0) {
    return Fail("ckpt plan", absl::InvalidArgumentError(absl::StrCat("--tp=", layout.tp, " does not divide N_H = ", dims->n_heads)));
  }
  if (layout.pp < 1 || dims->n_layers % layout.pp != 0) {
    return Fail("ckpt plan", absl::InvalidArgumentError(absl::StrCat("--pp=", layout.pp, " does not divide N_L = ", dims->n_layers)));
  }
  if (layout.dp < 1) return Fail("ckpt plan", absl::InvalidArgumentError("--dp must be >= 1"));
  if (layout.zero != 0 && layout.zero != 1) {
    return Fail("ckpt plan", absl::InvalidArgumentError(absl::StrCat("--zero=", layout.zero, ": expected 0 or 1")));
  }
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

absl::StatusOr<CheckpointRef> OpenGiven() {
  const std::string path = absl::GetFlag(FLAGS_checkpoint);
  if (path.empty()) return absl::InvalidArgumentError("--checkpoint: a checkpoint or run directory is required");
  return OpenCheckpointOrRun(path);
}

int Export() {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return Fail("ckpt export", absl::InvalidArgumentError("--out: an output .h5 path is required"));
  if (auto s = CheckOutputPath("out", out, {absl::GetFlag(FLAGS_checkpoint)}); !s.ok()) return Fail("ckpt export", s);
  auto ckpt = OpenGiven();
  if (!ckpt.ok()) return Fail("ckpt export", ckpt.status());
  auto weights = ConsolidatedWeights(*ckpt);
  if (!weights.ok()) return Fail("ckpt export", weights.status());
  const ParamLayout full(weights->dims, ShardSpec::Full(weights->dims));
  if (auto s = WriteWeightsFile(out, full, weights->params.data()); !s.ok()) return Fail("ckpt export", s);
  LogInfo("exported ", ckpt->dir, " (step ", ckpt->meta.step, ") to ", out);
  return 0;
}

int Inspect() {
  auto ckpt = OpenGiven();
  if (!ckpt.ok()) return Fail("ckpt inspect", ckpt.status());
  const CheckpointMeta& m = ckpt->meta;
  std::printf("checkpoint %s\n  model %s, step %lld, samples %lld, tokens %lld, adam step %lld\n", ckpt->dir.c_str(),
              m.dims.name.c_str(), (long long)m.step, (long long)m.samples, (long long)m.tokens, (long long)m.adam_step);
  std::printf("  layout tp=%lld pp=%lld dp=%lld zero=%lld, loss scale %g\n", (long long)m.layout.tp, (long long)m.layout.pp,
              (long long)m.layout.dp, (long long)m.layout.zero, m.loss_scale);
  int64_t total = 0;
  for (const auto& [file, record] : ckpt->manifest["files"].items()) {
    std::printf("  %-24s %12lld bytes, %zu datasets\n", file.c_str(), (long long)record["bytes"].get<int64_t>(),
                record["datasets"].size());
    total += record["bytes"].get<int64_t>();
  }
  const std::vector<std::string> problems = VerifyCheckpoint(*ckpt);
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
  const char* usage = "multiscreen ckpt plan|export|inspect [--flags]";
  if (argc < 2) return Fail("ckpt", absl::InvalidArgumentError("expected a subcommand: plan, export or inspect"));
  const std::string sub = argv[1];
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::printf("usage: multiscreen ckpt plan --model=M --tp=N --pp=N [--dp=N --zero=1]\n"
                "       multiscreen ckpt export --checkpoint=DIR --out=FILE.h5\n"
                "       multiscreen ckpt inspect --checkpoint=DIR\n");
    return 0;
  }
  if (sub != "plan" && sub != "export" && sub != "inspect") {
    return Fail("ckpt", absl::InvalidArgumentError(absl::StrCat("unknown subcommand '", sub, "': expected plan, export or inspect")));
  }
  const std::initializer_list<std::string_view> plan = {"model", "tp", "pp", "dp", "zero"}, export_flags = {"checkpoint", "out"},
                                                inspect = {"checkpoint"};
  if (auto s = ParseFlags(argc - 1, argv + 1, usage, sub == "plan" ? plan : sub == "export" ? export_flags : inspect);
      !s.ok()) {
    return Fail("ckpt", s);
  }
  if (sub == "plan") return Plan();
  if (sub == "export") return Export();
  return Inspect();
}

}  // namespace multiscreen::cli
