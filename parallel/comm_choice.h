// Which transport a rank's tp, pp, dp and embedding groups use (issue 15), chosen once
// at start-up from the step's device and what the node offers:
//   cpu                                    → mpi: MPI on host buffers, as ever;
//   cuda, NCCL built, a GPU per local rank → nccl: NCCL on device buffers, one GPU
//                                            per rank (ids broadcast over MPI); the
//                                            node's ranks' GPUs are told apart by PCI
//                                            bus id, so that ranks each seeing only
//                                            their own GPU (--gpus-per-task=1) count;
//   cuda, ranks sharing a GPU or no NCCL   → staged: MPI with every float transfer
//                                            downloaded and uploaded through the
//                                            kernel table (parallel/staged_communicator.h).
// --comm=auto|mpi|staged|nccl forces one (mpi on a GPU is the staged path, since MPI
// reads host memory; staged on the CPU copies through the CPU table, for tests). The
// world communicator (statuses, stop flags, norms: host scalars) stays MPI always.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "kernels/buffer.h"

namespace multiscreen {

enum class CommKind { kAuto, kMpi, kStaged, kNccl };

std::string CommKindName(CommKind kind);  // "auto", "mpi", "staged", "nccl"

// The value of --comm. Errors: anything else, naming the flag and the choices.
absl::StatusOr<CommKind> ParseCommKind(const std::string& flag);

// What the choice depends on, per rank.
struct CommEnvironment {
  Device device = Device::kCpu;  // the step's device
  bool nccl_built = false;       // this build has the NCCL communicator
  int local_ranks = 1;           // processes of this job on this node
  int visible_gpus = 0;          // CUDA devices this process sees
  // Distinct GPUs (PCI bus ids) bound by this node's ranks, or -1 when unknown; when
  // known it decides whether every rank has a GPU of its own.
  int node_gpus = -1;
};

// The transport for `requested` in `env` (never kAuto). Errors, naming --comm: nccl on
// the CPU, nccl in a build without NCCL, nccl with more ranks on the node than GPUs
// (NCCL needs a GPU of its own per rank).
absl::StatusOr<CommKind> ChooseCommKind(CommKind requested, const CommEnvironment& env);

// Whether this build has the NCCL communicator (MULTISCREEN_HAVE_NCCL).
bool NcclBuilt();

}  // namespace multiscreen
