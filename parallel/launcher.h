// What the launcher (mpirun, srun, a Slurm allocation) says about this process, read
// from its environment, and the check that MPI agrees with it: `srun -n 2 --mpi=none`
// starts two one-process MPI worlds, which would otherwise only collide on the run
// directory's lock without saying why.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace multiscreen {

// True when an MPI launcher started this process (mpirun, srun --mpi=pmix, …):
// OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK or PMI_SIZE is set.
bool LaunchedByMpi();

// What the launcher says about this process, for the log: "SLURM_PROCID=1
// SLURM_NTASKS=2 ..." (the variables that are set), or "none".
std::string LauncherEnv();

// OK when the launcher's process count equals `mpi_world_size` or no launcher variable
// gives one; otherwise a one-line error naming the variable and the likely cause, e.g.
// "SLURM_STEP_NUM_TASKS=2 but MPI sees 1 process: srun needs --mpi=pmix ...". The count
// is OMPI_COMM_WORLD_SIZE or PMI_SIZE when an MPI launcher set one (mpirun inside a Slurm
// allocation), else the task count of the srun step this process belongs to
// (SLURM_STEP_NUM_TASKS; the job's SLURM_NTASKS alone, in a batch script or salloc shell
// without srun, is no error). Call it before anything is written.
absl::Status CheckLauncherProcessCount(int mpi_world_size);

// For a command that runs in one process (every command but train; cli
// RefuseSeveralProcesses): OK when no launcher, or a launcher of
// one process, started this one (the count as CheckLauncherProcessCount reads it).
// Otherwise "<command> is single-process: the launcher started N processes (VAR=N); run it
// without mpirun or srun", and *quiet set when this is not the launcher's rank 0
// (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK or SLURM_PROCID), so that the job says it
// once: that rank exits non-zero without a word.
absl::Status RequireSingleProcess(const std::string& command, bool* quiet);

}  // namespace multiscreen
