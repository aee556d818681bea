// `multiscreen plan --model=M --gpus=N [--seq_len=4096 --gpu=h100|h200|a100 --gpus_per_node=8
// --global_batch=TOKENS --precision=bf16 --json]` (issue 45): the tp × pp × dp layouts of a
// model on N GPUs with each rank's modelled device memory, and those that fit ranked by
// modelled step time. The model is loaded here (the same names and files as `train`);
// the plan itself is tools/plan.py, run with Debian's /usr/bin/python3 over the model's
// sizes, so that its compute is tools/perf_model.py's own code. Every flag but the model
// is checked there, in one line naming the flag. Exit status: plan.py's (2 when the plan was
// printed but no layout fits).
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/planner.h"
#include "cli/python_tool.h"
#include "common/config.h"
#include "nlohmann/json.hpp"

ABSL_DECLARE_FLAG(bool, json);  // params_command.cc
ABSL_FLAG(int64_t, gpus, 0, "plan: GPUs of the job (tp x pp x dp)");
ABSL_FLAG(std::string, gpu, "h100", "plan: h100 | h200 | a100 (memory, peak, HBM and link constants)");
ABSL_FLAG(int64_t, gpus_per_node, 8, "plan: GPUs per node (NVLink within a node, InfiniBand across)");
ABSL_FLAG(int64_t, global_batch, int64_t{1} << 22, "plan: tokens per optimizer step (a whole number of sequences)");
ABSL_FLAG(int64_t, top, 10, "plan: layouts printed (--json lists every one)");

namespace multiscreen::cli {

int PlanCommand(int argc, char** argv) {
  if (int rc = RefuseSeveralProcesses("plan"); rc != 0) return rc;
  // The plan's own defaults (the paper's recipe: T = 4096, bf16), shown by --help.
  absl::SetFlag(&FLAGS_seq_len, 4096);
  absl::SetFlag(&FLAGS_precision, "bf16");
  absl::SetFlag(&FLAGS_model, "");  // required: no model by default
  if (auto s = ParseFlags(argc, argv,
                          "multiscreen plan --model=M --gpus=N [--seq_len=4096 --gpu=h100|h200|a100 --gpus_per_node=8 "
                          "--global_batch=TOKENS --precision=bf16|fp16|fp32 --device_memory=BYTES --top=10 --json]",
                          {"model", "gpus", "seq_len", "gpu", "gpus_per_node", "global_batch", "precision", "top", "json",
                           "device_memory"});
      !s.ok()) {
    return Fail("plan", s);
  }
  if (!Given(GivenFlags(argc, argv), "model")) {
    return Fail("plan", absl::InvalidArgumentError("--model is required (a name under configs/models/ or a .textproto)"));
  }
  auto dims = LoadModel(absl::GetFlag(FLAGS_model));
  if (!dims.ok()) return Fail("plan", dims.status());
  const nlohmann::json j = PlanDims(*dims);
  auto script = PythonToolPath("plan.py", "the planner");
  if (!script.ok()) return Fail("plan", script.status());
  std::vector<std::string> args = {"--dims=" + j.dump(),
                                   absl::StrCat("--gpus=", absl::GetFlag(FLAGS_gpus)),
                                   absl::StrCat("--seq_len=", absl::GetFlag(FLAGS_seq_len)),
                                   "--gpu=" + absl::GetFlag(FLAGS_gpu),
                                   absl::StrCat("--gpus_per_node=", absl::GetFlag(FLAGS_gpus_per_node)),
                                   absl::StrCat("--global_batch=", absl::GetFlag(FLAGS_global_batch)),
                                   "--precision=" + absl::GetFlag(FLAGS_precision),
                                   absl::StrCat("--top=", absl::GetFlag(FLAGS_top))};
  if (absl::GetFlag(FLAGS_json)) args.push_back("--json");
  const absl::StatusOr<int64_t> device_memory = DeviceMemoryFlag();  // as train reads it
  if (!device_memory.ok()) return Fail("plan", device_memory.status());
  if (*device_memory > 0) args.push_back(absl::StrCat("--device_memory=", *device_memory));
  // plan.py's own status: 0, 1 (its one-line error said), 2 (printed, but no layout fits).
  auto status = RunPythonTool(*script, args);
  if (!status.ok()) return Fail("plan", status.status());
  return *status;
}

}  // namespace multiscreen::cli
