// `multiscreen plan --model=M --gpus=N [--seq_len=4096 --gpu=h100|h200|a100 --gpus_per_node=8
// --global_batch=TOKENS --precision=bf16 --json]` (issue 45): the tp × pp × dp layouts of a
// model on N GPUs with each rank's modelled device memory, and those that fit ranked by
// modelled step time. The model is loaded here (the same names and files as `train`);
// the plan itself is tools/plan.py, run with Debian's /usr/bin/python3 over the model's
// sizes, so that its compute is tools/perf_model.py's own code. Every flag but the model
// is checked there, in one line naming the flag.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/config.h"
#include "kernels/attention_kind.h"
#include "kernels/screening_types.h"
#include "nlohmann/json.hpp"

ABSL_DECLARE_FLAG(bool, json);  // params_command.cc
ABSL_FLAG(int64_t, gpus, 0, "plan: GPUs of the job (tp x pp x dp)");
ABSL_FLAG(std::string, gpu, "h100", "plan: h100 | h200 | a100 (memory, peak, HBM and link constants)");
ABSL_FLAG(int64_t, gpus_per_node, 8, "plan: GPUs per node (NVLink within a node, InfiniBand across)");
ABSL_FLAG(int64_t, global_batch, int64_t{1} << 22, "plan: tokens per optimizer step (a whole number of sequences)");
ABSL_FLAG(int64_t, top, 10, "plan: layouts printed (--json lists every one)");

namespace multiscreen::cli {
namespace fs = std::filesystem;

int PlanCommand(int argc, char** argv) {
  if (int rc = RefuseSeveralProcesses("plan"); rc != 0) return rc;
  // The plan's own defaults (the paper's recipe: T = 4096, bf16), shown by --help.
  absl::SetFlag(&FLAGS_seq_len, 4096);
  absl::SetFlag(&FLAGS_precision, "bf16");
  absl::SetFlag(&FLAGS_model, "");  // required: no model by default
  if (auto s = ParseFlags(argc, argv,
                          "multiscreen plan --model=M --gpus=N [--seq_len=4096 --gpu=h100|h200|a100 --gpus_per_node=8 "
                          "--global_batch=TOKENS --precision=bf16|fp16|fp32 --top=10 --json]",
                          {"model", "gpus", "seq_len", "gpu", "gpus_per_node", "global_batch", "precision", "top", "json"});
      !s.ok()) {
    return Fail("plan", s);
  }
  if (!Given(GivenFlags(argc, argv), "model")) {
    return Fail("plan", absl::InvalidArgumentError("--model is required (a name under configs/models/ or a .textproto)"));
  }
  auto dims = LoadModel(absl::GetFlag(FLAGS_model));
  if (!dims.ok()) return Fail("plan", dims.status());
  const nlohmann::json j = {{"name", dims->name},
                            {"family", dims->transformer() ? "TRANSFORMER" : "MULTISCREEN"},
                            {"n_layers", dims->n_layers},
                            {"n_heads", dims->n_heads},
                            {"d_e", dims->d_e},
                            {"d_k", dims->d_k},
                            {"d_v", dims->d_v},
                            {"vocab", dims->vocab},
                            {"w_th", dims->w_th},
                            {"position", kernels::PositionKindName(dims->position)},
                            {"output_gate", dims->output_gate},
                            {"attention", AttentionKindName(dims->attention)},
                            {"qk_norm", dims->qk_norm},
                            {"sio", dims->sio},
                            {"pl_norm", dims->pl_norm}};
  const fs::path script = fs::path(ConfigDir()).parent_path() / "tools/plan.py";
  if (!fs::is_regular_file(script)) {
    return Fail("plan", absl::NotFoundError(absl::StrCat(script.string(), " not found (the planner beside configs/)")));
  }
  std::vector<std::string> args = {fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3",
                                   script.string(),
                                   "--dims=" + j.dump(),
                                   absl::StrCat("--gpus=", absl::GetFlag(FLAGS_gpus)),
                                   absl::StrCat("--seq_len=", absl::GetFlag(FLAGS_seq_len)),
                                   "--gpu=" + absl::GetFlag(FLAGS_gpu),
                                   absl::StrCat("--gpus_per_node=", absl::GetFlag(FLAGS_gpus_per_node)),
                                   absl::StrCat("--global_batch=", absl::GetFlag(FLAGS_global_batch)),
                                   "--precision=" + absl::GetFlag(FLAGS_precision),
                                   absl::StrCat("--top=", absl::GetFlag(FLAGS_top))};
  if (absl::GetFlag(FLAGS_json)) args.push_back("--json");
  std::vector<char*> exec_argv;
  for (std::string& a : args) exec_argv.push_back(a.data());
  exec_argv.push_back(nullptr);
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid < 0) return Fail("plan", absl::InternalError("cannot start tools/plan.py: fork failed"));
  if (pid == 0) {
    ::execvp(exec_argv[0], exec_argv.data());
    std::fprintf(stderr, "multiscreen plan: cannot run %s: python3 not found\n", exec_argv[0]);
    ::_exit(127);
  }
  int status = 0;
  pid_t waited;
  do {
    waited = ::waitpid(pid, &status, 0);
  } while (waited < 0 && errno == EINTR);
  if (waited < 0) return Fail("plan", absl::InternalError("waiting for tools/plan.py failed"));
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return Fail("plan", absl::InternalError(absl::StrCat(script.string(), " ended by signal ", WTERMSIG(status))));
}

}  // namespace multiscreen::cli
