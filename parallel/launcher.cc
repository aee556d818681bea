#include "parallel/launcher.h"

#include <cstdlib>
#include <initializer_list>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace multiscreen {
namespace {

// The first of `vars` that is set to a positive integer: its name and value.
bool FirstCount(std::initializer_list<const char*> vars, std::string* name, int64_t* count) {
  for (const char* var : vars) {
    const char* value = std::getenv(var);
    int64_t n = 0;
    if (value != nullptr && absl::SimpleAtoi(value, &n) && n > 0) {
      *name = var;
      *count = n;
      return true;
    }
  }
  return false;
}

}  // namespace

bool LaunchedByMpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    if (std::getenv(var) != nullptr) return true;
  }
  return false;
}

std::string LauncherEnv() {
  std::string out;
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "PMIX_RANK",
                          "SLURM_JOB_ID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_RESTART_COUNT",
                          "CUDA_VISIBLE_DEVICES"}) {
    if (const char* value = std::getenv(var)) absl::StrAppend(&out, out.empty() ? "" : " ", var, "=", value);
  }
  return out.empty() ? "none" : out;
}

absl::Status CheckLauncherProcessCount(int mpi_world_size) {
  std::string var;
  int64_t count = 0;
  std::string cause;
  if (FirstCount({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, &var, &count)) {
    cause = "the launcher and the MPI library this binary links do not match (an mpirun of another MPI?)";
  } else if (FirstCount({"SLURM_STEP_NUM_TASKS"}, &var, &count)) {
    // Only srun's step count: a batch script or salloc shell (SLURM_NTASKS of the job, no
    // step) may run one process on purpose.
    cause = "srun needs --mpi=pmix (srun --mpi=list shows what the cluster has); for one process, srun -n 1";
  } else {
    return absl::OkStatus();
  }
  if (count == mpi_world_size) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(var, "=", count, " but MPI sees ", mpi_world_size, " process",
                                                    mpi_world_size == 1 ? "" : "es", ": ", cause));
}

absl::Status RequireSingleProcess(const std::string& command, bool* quiet) {
  *quiet = false;
  std::string var;
  int64_t count = 0;
  if (!FirstCount({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}, &var, &count) || count == 1) {
    return absl::OkStatus();
  }
  for (const char* rank_var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    const char* value = std::getenv(rank_var);
    int64_t rank = 0;
    if (value != nullptr && absl::SimpleAtoi(value, &rank)) {
      *quiet = rank != 0;
      break;
    }
  }
  return absl::FailedPreconditionError(absl::StrCat(command, " is single-process: the launcher started ", count,
                                                    " processes (", var, "=", count, "); run it without mpirun or srun"));
}

}  // namespace multiscreen
