// The sweep's Slurm job array script (sweep_slurm.h).
#include "launch/sweep_slurm.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace multiscreen {
namespace {

// `s` quoted for bash: single quotes, embedded ones as '\''.
std::string Quote(const std::string& s) { return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "'\\''"}}), "'"); }

}  // namespace

std::string SlurmOutputPattern(const Sweep& sweep) {
  return (std::filesystem::path(sweep.root) / "slurm" / "%A_%a.out").string();
}

std::string SlurmArrayScript(const Sweep& sweep, const std::vector<size_t>& indices, const std::string& binary,
                             const std::string& train_sbatch, int threads) {
  const std::string output = SlurmOutputPattern(sweep);
  // sbatch reads #SBATCH lines without shell quoting: a path with a space or a quote goes
  // on sbatch's command line instead (`sweep run --slurm` puts it there).
  const bool plain = output.find_first_of(" \t\"'\\$`") == std::string::npos;
  std::string s = absl::StrCat(
      "#!/bin/bash\n"
      "# Written by `multiscreen sweep run --slurm` for ", sweep.file, ": one array task per run that was not\n"
      "# done, each running launch/train.sbatch's preemptible, requeue-safe protocol on its run directory.\n"
      "#SBATCH --job-name=sweep\n"
      "#SBATCH --array=0-", indices.size() - 1, "\n"
      "#SBATCH --nodes=1\n"
      "#SBATCH --ntasks=1\n"
      "#SBATCH --cpus-per-task=", threads, "\n"
      "#SBATCH --time=04:00:00\n"
      "#SBATCH --signal=USR1@300\n"
      "#SBATCH --requeue\n"
      "#SBATCH --open-mode=append\n",
      plain ? absl::StrCat("#SBATCH --output=", output, "\n")
            : absl::StrCat("# sbatch --output=", Quote(output), " (on the command line: the path has a space or quote)\n"),
      "set -uo pipefail\n"
      "runs=(\n");
  for (size_t i : indices) absl::StrAppend(&s, "  ", Quote(sweep.runs[i].dir), "\n");
  absl::StrAppend(&s, ")\n",
                  "export RUN_DIR=${runs[$SLURM_ARRAY_TASK_ID]}\n"
                  "export CONFIG=$RUN_DIR/run.textproto\n"
                  "export MULTISCREEN=", Quote(binary), "\n",
                  "unset DATA TP PP ZERO STEPS TRAIN_ARGS\n"
                  "if grep -qs '\"state\": *\"finished\"' \"$RUN_DIR/status.json\"; then\n"
                  "  echo \"[sweep] $RUN_DIR is finished\"; exit 0\n"
                  "fi\n"
                  "# The lock `sweep status` reads and `sweep run --local` takes: one trainer per run.\n"
                  "exec 9>>\"$RUN_DIR/sweep.lock\"\n"
                  "if ! flock -n 9; then echo \"[sweep] $RUN_DIR is being trained elsewhere\" >&2; exit 75; fi\n"
                  "rm -f \"$RUN_DIR/sweep_failed.json\"\n"
                  "exec bash ", Quote(train_sbatch), "\n");
  return s;
}

}  // namespace multiscreen
