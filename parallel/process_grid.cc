#include "parallel/process_grid.h"

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "parallel/fatal.h"
#include "parallel/mpi_communicator.h"
#include "parallel/progress.h"
#include "parallel/staged_communicator.h"

#ifdef MULTISCREEN_HAVE_NCCL
#include <cuda_runtime.h>

#include "parallel/nccl_communicator.h"
#endif

namespace multiscreen {

int GridRank(const GridShape& shape, const GridCoord& c) { return (c.dp * shape.pp + c.pp) * shape.tp + c.tp; }

GridCoord GridCoordOf(const GridShape& shape, int rank) {
  GridCoord c;
  c.tp = rank % shape.tp;
  c.pp = (rank / shape.tp) % shape.pp;
  c.dp = rank / (shape.tp * shape.pp);
  return c;
}

namespace {

// A communicator over the ranks of `world` with the same `color`, ordered by `key`;
// null for MPI_UNDEFINED.
std::unique_ptr<Communicator> Split(MPI_Comm world, int color, int key) {
  MPI_Comm comm = MPI_COMM_NULL;
  const progress::CollectiveWait wait(progress::Collective::kCommSetUp);
  MS_MPI_CHECK(MPI_Comm_split(world, color, key, &comm));
  if (comm == MPI_COMM_NULL) return nullptr;
  return MpiCommunicator::Adopt(comm);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGrid>> ProcessGrid::Create(int tp, int pp, MPI_Comm world) {
  int world_size = 0, world_rank = 0;
  MS_MPI_CHECK(MPI_Comm_size(world, &world_size));
  MS_MPI_CHECK(MPI_Comm_rank(world, &world_rank));
  if (tp < 1) return absl::InvalidArgumentError(absl::StrCat("--tp=", tp, " must be at least 1"));
  if (pp < 1) return absl::InvalidArgumentError(absl::StrCat("--pp=", pp, " must be at least 1"));
  if (world_size % (tp * pp) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--tp=", tp, " × --pp=", pp, " = ", tp * pp,
                                                   " does not divide the ", world_size, " ranks of this job"));
  }
  std::unique_ptr<ProcessGrid> g(new ProcessGrid());
  g->shape_ = GridShape{tp, pp, world_size / (tp * pp)};
  g->world_rank_ = world_rank;
  g->coord_ = GridCoordOf(g->shape_, world_rank);
  const GridShape& s = g->shape_;
  const GridCoord& c = g->coord_;

  auto world_comm = MpiCommunicator::Duplicate(world);
  MPI_Comm base = world_comm->comm();
  MPI_Comm node = MPI_COMM_NULL;
  {
    const progress::CollectiveWait wait(progress::Collective::kCommSetUp);
    MS_MPI_CHECK(MPI_Comm_split_type(base, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node));
  }
  MS_MPI_CHECK(MPI_Comm_rank(node, &g->local_rank_));
  MS_MPI_CHECK(MPI_Comm_size(node, &g->local_size_));
  MS_MPI_CHECK(MPI_Comm_free(&node));

  // Colors name the group; keys order it by the coordinate that varies inside.
  g->tp_ = Split(base, c.dp * s.pp + c.pp, c.tp);
  g->pp_ = Split(base, c.dp * s.tp + c.tp, c.pp);
  g->dp_ = Split(base, c.pp * s.tp + c.tp, c.dp);
  const bool in_embed = s.pp > 1 && (c.pp == 0 || c.pp == s.pp - 1);
  g->embed_ = Split(base, in_embed ? c.dp * s.tp + c.tp : MPI_UNDEFINED, c.pp);
  g->world_ = std::move(world_comm);
  SetFatalContext(absl::StrCat("dp ", c.dp, ", pp ", c.pp, ", tp ", c.tp));
  return g;
}

absl::StatusOr<std::unique_ptr<Communicator>> ProcessGrid::DuplicateDp() {
  if (dp_->size() == 1) return std::unique_ptr<Communicator>(new SingleProcessCommunicator(dp_->device()));
  // The transport under the step's dp group: MPI itself, or the MPI a staged group wraps.
  // An NCCL group is not duplicated: a second NCCL communicator driven from another
  // thread could order its kernels differently on different ranks and hang them; the
  // reducer then works without overlap (a communication stream is the way there).
  auto* staged = dynamic_cast<StagedCommunicator*>(dp_.get());
  auto* mpi = dynamic_cast<MpiCommunicator*>(staged != nullptr ? &staged->host() : dp_.get());
  if (mpi == nullptr) return std::unique_ptr<Communicator>();
  int level = MPI_THREAD_SINGLE;
  MS_MPI_CHECK(MPI_Query_thread(&level));
  if (level < MPI_THREAD_MULTIPLE) {
    const char* names[] = {"MPI_THREAD_SINGLE", "MPI_THREAD_FUNNELED", "MPI_THREAD_SERIALIZED"};
    return absl::FailedPreconditionError(absl::StrCat(
        "--dp_overlap=on needs MPI_THREAD_MULTIPLE (a communication thread beside the main one), but this MPI gives ",
        level >= MPI_THREAD_SINGLE && level <= MPI_THREAD_SERIALIZED ? names[level - MPI_THREAD_SINGLE] : "less",
        "; use --dp_overlap=off"));
  }
  std::unique_ptr<Communicator> dup = MpiCommunicator::Duplicate(mpi->comm());
  if (staged != nullptr) return std::unique_ptr<Communicator>(new StagedCommunicator(std::move(dup), staged->ops()));
  return dup;
}

std::unique_ptr<ProcessGrid> ProcessGrid::Single() {
  std::unique_ptr<ProcessGrid> g(new ProcessGrid());
  g->world_ = std::make_unique<SingleProcessCommunicator>();
  g->tp_ = std::make_unique<SingleProcessCommunicator>();
  g->pp_ = std::make_unique<SingleProcessCommunicator>();
  g->dp_ = std::make_unique<SingleProcessCommunicator>();
  return g;
}

namespace {

// The number of distinct GPUs (PCI bus ids) that the ranks of this node have bound, or
// -1 where it cannot be told (no CUDA build, a rank without a device). Collective over
// `world`.
int DistinctNodeGpus(MPI_Comm world) {
  char bus[32] = {};
#ifdef MULTISCREEN_HAVE_CUDA
  int gpu = 0;
  if (cudaGetDevice(&gpu) != cudaSuccess || cudaDeviceGetPCIBusId(bus, sizeof(bus), gpu) != cudaSuccess) bus[0] = 0;
#endif
  MPI_Comm node = MPI_COMM_NULL;
  int rank = 0, size = 1;
  MS_MPI_CHECK(MPI_Comm_rank(world, &rank));
  {
    const progress::CollectiveWait wait(progress::Collective::kCommSetUp);
    MS_MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  }
  MS_MPI_CHECK(MPI_Comm_size(node, &size));
  std::vector<char> all(size_t(size) * sizeof(bus));
  {
    const progress::CollectiveWait wait(progress::Collective::kAllGather);
    MS_MPI_CHECK(MPI_Allgather(bus, sizeof(bus), MPI_CHAR, all.data(), sizeof(bus), MPI_CHAR, node));
  }
  MS_MPI_CHECK(MPI_Comm_free(&node));
  std::set<std::string> ids;
  for (int r = 0; r < size; ++r) {
    const std::string id(all.data() + r * sizeof(bus), strnlen(all.data() + r * sizeof(bus), sizeof(bus)));
    if (id.empty()) return -1;
    ids.insert(id);
  }
  return static_cast<int>(ids.size());
}

}  // namespace

absl::Status ProcessGrid::UseStepDevice(Device device, CommKind requested) {
  CommEnvironment env{device, NcclBuilt(), local_size_, device == Device::kCpu ? 0 : CudaDeviceCount()};
  if (device != Device::kCpu) {
    if (auto* mpi = dynamic_cast<MpiCommunicator*>(world_.get())) env.node_gpus = DistinctNodeGpus(mpi->comm());
  }
  absl::StatusOr<CommKind> mine = ChooseCommKind(requested, env);
  // Agree: 0 mpi, 1 nccl, 2 staged (a rank that must stage makes every rank stage),
  // 3 an error somewhere. The kinds only differ between ranks across nodes.
  double code = !mine.ok() ? 3 : *mine == CommKind::kMpi ? 0 : *mine == CommKind::kNccl ? 1 : 2;
  world_->AllReduce(&code, 1, ReduceOp::kMax);
  if (!mine.ok()) return mine.status();
  if (code == 3) {
    return absl::FailedPreconditionError(absl::StrCat("--comm=", CommKindName(requested),
                                                      ": another rank cannot use it (see its message)"));
  }
  const CommKind kind = code == 0 ? CommKind::kMpi : code == 1 ? CommKind::kNccl : CommKind::kStaged;
  if (kind == CommKind::kStaged) {
    auto ops = MakeKernelTable<float>(device);
    if (!ops.ok()) return ops.status();
    staging_ops_ = std::move(*ops);
  }
#ifdef MULTISCREEN_HAVE_NCCL
  int gpu = 0;
  if (kind == CommKind::kNccl) {
    if (cudaError_t e = cudaGetDevice(&gpu); e != cudaSuccess) {
      return absl::InternalError(absl::StrCat("cudaGetDevice: ", cudaGetErrorString(e)));
    }
  }
#endif
  // Each group in the same order on every rank (NCCL's initialization is collective).
  auto adapt = [&](std::unique_ptr<Communicator>& group) -> absl::Status {
    if (group == nullptr) return absl::OkStatus();
    if (group->size() == 1) {
      group = std::make_unique<SingleProcessCommunicator>(device);
      return absl::OkStatus();
    }
    switch (kind) {
      case CommKind::kStaged:
        group = std::make_unique<StagedCommunicator>(std::move(group), staging_ops_.get());
        break;
      case CommKind::kNccl: {
#ifdef MULTISCREEN_HAVE_NCCL
        auto nccl = NcclCommunicator::Create(*group, gpu);
        if (!nccl.ok()) return nccl.status();
        group = std::move(*nccl);  // the MPI group was its bootstrap only
#endif
        break;
      }
      default:
        break;
    }
    return absl::OkStatus();
  };
  for (std::unique_ptr<Communicator>* group : {&tp_, &pp_, &dp_, &embed_}) {
    if (auto s = adapt(*group); !s.ok()) return s;
  }
  comm_kind_ = kind;
  step_device_ = device;
  return absl::OkStatus();
}

std::string ProcessGrid::Describe() const {
  return absl::StrCat("rank ", world_rank_, " of ", world_size(), ": dp ", coord_.dp, ", pp ", coord_.pp, ", tp ",
                      coord_.tp, " (local rank ", local_rank_, " of ", local_size_, ")");
}

}  // namespace multiscreen
