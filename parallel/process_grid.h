// The dp × pp × tp process grid (DESIGN "Layout", parallel/): world rank
// r = (dp_i·pp + pp_i)·tp + tp_i, so the tp group (the most traffic: two
// all-reduces per layer) is made of neighbouring ranks, usually one node.
// Each rank gets communicators for its tp group, its pp group (the stages of
// one model replica, for activations), its dp group (the replicas of the same
// shard, for gradients) and its embedding group (first and last stage of the
// same tp rank, for the tied W_E gradient).
//
// Create makes them MPI communicators on host memory. UseStepDevice then gives the
// tp, pp, dp and embedding groups the transport of the step's device
// (parallel/comm_choice.h: MPI, staged MPI or NCCL); the world communicator stays MPI
// (it moves host scalars only: statuses, stop flags, the norm's sum).
#pragma once

#include <memory>
#include <string>

#include <mpi.h>

#include "absl/status/statusor.h"
#include "kernels/communicator.h"
#include "kernels/kernel_table.h"
#include "parallel/comm_choice.h"

namespace multiscreen {

struct GridShape {
  int tp = 1, pp = 1, dp = 1;
  int world() const { return tp * pp * dp; }
};

struct GridCoord {
  int tp = 0, pp = 0, dp = 0;  // pp is the pipeline stage
};

// r = (dp·pp_size + pp)·tp_size + tp, and back.
int GridRank(const GridShape& shape, const GridCoord& coord);
GridCoord GridCoordOf(const GridShape& shape, int rank);

class ProcessGrid {
 public:
  // Splits `world` (every rank calls this) into the grid for --tp and --pp,
  // with dp = world size / (tp·pp). Reads the node-local rank through
  // MPI_COMM_TYPE_SHARED, so it works under mpirun and srun --mpi=pmix alike.
  // Errors: tp or pp below 1, or tp·pp not dividing the number of ranks
  // ("--tp=2 × --pp=3 = 6 does not divide the 8 ranks of this job").
  static absl::StatusOr<std::unique_ptr<ProcessGrid>> Create(int tp, int pp, MPI_Comm world = MPI_COMM_WORLD);

  // The grid of one process, without MPI: every group is a SingleProcessCommunicator.
  static std::unique_ptr<ProcessGrid> Single();

  // Every rank calls this once, after binding its GPU (cudaSetDevice) and before a
  // model uses the groups: the tp, pp, dp and embedding groups then move float buffers
  // on `device` by the transport ChooseCommKind picks for `requested` (groups of one
  // become SingleProcessCommunicators of `device`). The ranks agree: if any rank
  // would stage, all do. A collective over the world. Errors: ChooseCommKind's on
  // some rank (every rank returns one), the kernel table of `device`, NCCL's
  // initialization (fatal for the job, as every NCCL failure).
  absl::Status UseStepDevice(Device device, CommKind requested = CommKind::kAuto);
  // What UseStepDevice chose (kMpi before it is called) and for which device.
  CommKind comm_kind() const { return comm_kind_; }
  Device step_device() const { return step_device_; }

  const GridShape& shape() const { return shape_; }
  const GridCoord& coord() const { return coord_; }
  int world_rank() const { return world_rank_; }
  int world_size() const { return shape_.world(); }
  int local_rank() const { return local_rank_; }  // rank among the processes of this node (its GPU)
  int local_size() const { return local_size_; }
  bool first_stage() const { return coord_.pp == 0; }
  bool last_stage() const { return coord_.pp == shape_.pp - 1; }

  Communicator& world() { return *world_; }
  Communicator& tp() { return *tp_; }  // rank = coord().tp
  Communicator& pp() { return *pp_; }  // rank = coord().pp, the stage
  Communicator& dp() { return *dp_; }  // rank = coord().dp
  // A second communicator over this rank's dp group (same ranks, same order), for a
  // thread that communicates while the main thread does (the overlapped dp reducer,
  // parallel/data_parallel.h): its traffic never mixes with the main thread's. A
  // collective over the dp group. A group of one gets a group of one; a staged dp group
  // (UseStepDevice) a staged duplicate of its MPI transport; an NCCL dp group null (not
  // duplicated: a second NCCL communicator driven from another thread could order its
  // kernels differently on different ranks and hang them; the reducer then runs without
  // overlap). Errors: the MPI library gives less than MPI_THREAD_MULTIPLE (naming
  // --dp_overlap).
  absl::StatusOr<std::unique_ptr<Communicator>> DuplicateDp();

  // {first stage, last stage} of this (dp, tp): rank 0 is the first stage.
  // Null on middle stages and when pp = 1 (W_E then lives on one stage only).
  Communicator* embed() { return embed_.get(); }

  // "rank 5 of 8: dp 1, pp 0, tp 1 (local rank 1 of 4)".
  std::string Describe() const;

 private:
  ProcessGrid() = default;
  GridShape shape_;
  GridCoord coord_;
  int world_rank_ = 0, local_rank_ = 0, local_size_ = 1;
  std::unique_ptr<Communicator> world_, tp_, pp_, dp_, embed_;
  CommKind comm_kind_ = CommKind::kMpi;
  Device step_device_ = Device::kCpu;
  std::unique_ptr<kernels::KernelTable<float>> staging_ops_;  // the staged groups' copies
};

}  // namespace multiscreen
