// A sweep as one Slurm job array (issue 17, `sweep run --slurm`): one array task per
// run that is not done, each task running launch/train.sbatch's protocol unchanged
// (srun, checkpoint on SIGUSR1/SIGTERM, requeue until finished) on its own run
// directory. Array tasks have their own job ids, so train.sbatch's `scontrol requeue
// $SLURM_JOB_ID` requeues just that task.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "launch/sweep.h"

namespace multiscreen {

// The batch script for the runs `indices` of `sweep`: #SBATCH defaults (one task, the
// array, requeue, USR1 300 s before the limit, logs <root>/slurm/%A_%a.out; sbatch's
// command-line options override them), then the task's RUN_DIR and CONFIG and an exec
// of `train_sbatch` with MULTISCREEN=`binary`. A task whose run is already finished (a
// requeue after it finished) exits 0 without training. `threads`: --cpus-per-task.
// "<root>/slurm/%A_%a.out": where each array task's output goes (sbatch --output).
std::string SlurmOutputPattern(const Sweep& sweep);

std::string SlurmArrayScript(const Sweep& sweep, const std::vector<size_t>& indices, const std::string& binary,
                             const std::string& train_sbatch, int threads);

}  // namespace multiscreen
