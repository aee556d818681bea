// A job in which rank 1 fails while the others wait in a collective that would
// never complete: run under mpirun by expect_job_failure.sh, which requires a
// prompt non-zero exit naming rank 1 and the reason. Modes (argv[1]):
//   status     rank 1 meets an error Status and calls AbortJobIfError
//   mpi_error  rank 1 makes an invalid MPI call (caught by MS_MPI_CHECK)
//   exception  rank 1 throws an exception nobody catches
//   late       rank 1 sleeps between MPI_Init and the job's first exchange (a rank stopped
//              or slow right after MPI_Init, issue 43 §2); rank 0 must name it within the
//              start-up limit (3 × 1 s here), not wait with the others for ever
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "absl/status/status.h"
#include "parallel/fatal.h"
#include "parallel/mpi_communicator.h"
#include "parallel/mpi_session.h"
#include "parallel/start_up_exchange.h"

namespace {

int LateRankProbe(int* argc, char*** argv) {
  using namespace multiscreen;
  int provided = 0, rank = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 1) std::this_thread::sleep_for(std::chrono::seconds(120));
  StartUpExchange start = ExchangeAtStartUp(MPI_COMM_WORLD, {.seconds = 1});
  std::fprintf(stderr, "probe: rank %d passed the start-up exchange, which should be impossible\n", rank);
  MPI_Comm_free(&start.comm);
  MPI_Finalize();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace multiscreen;
  if (argc > 1 && std::strcmp(argv[1], "late") == 0) return LateRankProbe(&argc, &argv);
  auto session = MpiSession::Init(&argc, &argv);
  if (!session.ok()) {
    std::fprintf(stderr, "%s\n", session.status().ToString().c_str());
    return 2;
  }
  const char* mode = argc > 1 ? argv[1] : "status";
  auto world = MpiCommunicator::Duplicate(MPI_COMM_WORLD);
  float x = 1;
  if (world->rank() == 1) {
    if (std::strcmp(mode, "status") == 0) {
      AbortJobIfError(absl::NotFoundError("probe: data file /nonexistent/shard_000.bin not found"));
    } else if (std::strcmp(mode, "mpi_error") == 0) {
      MS_MPI_CHECK(MPI_Send(&x, -1, MPI_FLOAT, 0, 0, world->comm()));
    } else if (std::strcmp(mode, "exception") == 0) {
      throw std::runtime_error("probe: something unexpected");
    }
    std::fprintf(stderr, "probe: unknown mode %s\n", mode);
    return 3;
  }
  // The others wait for rank 1, which never comes.
  world->AllReduce(&x, 1, ReduceOp::kSum);
  std::fprintf(stderr, "probe: rank %d passed the all-reduce, which should be impossible\n", world->rank());
  return 0;
}
