#include "parallel/comm_choice.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace multiscreen {

std::string CommKindName(CommKind kind) {
  switch (kind) {
    case CommKind::kAuto: return "auto";
    case CommKind::kMpi: return "mpi";
    case CommKind::kStaged: return "staged";
    case CommKind::kNccl: return "nccl";
  }
  return "?";
}

absl::StatusOr<CommKind> ParseCommKind(const std::string& flag) {
  const std::string name = absl::AsciiStrToLower(flag);
  for (CommKind k : {CommKind::kAuto, CommKind::kMpi, CommKind::kStaged, CommKind::kNccl}) {
    if (name == CommKindName(k)) return k;
  }
  return absl::InvalidArgumentError(absl::StrCat("--comm=", flag, ": expected auto, mpi, staged or nccl"));
}

bool NcclBuilt() {
#ifdef MULTISCREEN_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

absl::StatusOr<CommKind> ChooseCommKind(CommKind requested, const CommEnvironment& env) {
  const bool gpu = env.device != Device::kCpu;
  const bool gpu_per_rank = env.visible_gpus > 0 && (env.node_gpus >= 0 ? env.node_gpus == env.local_ranks
                                                                        : env.local_ranks <= env.visible_gpus);
  switch (requested) {
    case CommKind::kMpi:
      return gpu ? CommKind::kStaged : CommKind::kMpi;  // MPI reads host memory
    case CommKind::kStaged:
      return CommKind::kStaged;
    case CommKind::kNccl:
      if (!gpu) return absl::InvalidArgumentError("--comm=nccl: NCCL moves GPU buffers; this step runs on the cpu");
      if (!env.nccl_built) {
        return absl::FailedPreconditionError("--comm=nccl: this build has no NCCL (NCCL_LIBRARY/NCCL_INCLUDE_DIR "
                                             "not found at configure time); --comm=staged runs over MPI");
      }
      if (!gpu_per_rank) {
        return absl::FailedPreconditionError(absl::StrCat(
            "--comm=nccl: ", env.local_ranks, " ranks on this node share ",
            env.node_gpus >= 0 ? env.node_gpus : env.visible_gpus,
            " visible GPU(s); NCCL needs one GPU per rank (--comm=staged runs ranks that share one)"));
      }
      return CommKind::kNccl;
    case CommKind::kAuto:
      if (!gpu) return CommKind::kMpi;
      return env.nccl_built && gpu_per_rank ? CommKind::kNccl : CommKind::kStaged;
  }
  return CommKind::kMpi;
}

}  // namespace multiscreen
