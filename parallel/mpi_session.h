// The process's MPI lifetime: MPI_Init_thread at start, MPI_Finalize at the end,
// with MPI errors returned to MS_MPI_CHECK (parallel/fatal.h) instead of MPI's
// default handler, uncaught exceptions turned into a job-wide abort, and from
// MPI_Init on a PeerWatchdog (parallel/peer_watchdog.h) ending the job with one line
// when a rank on this node dies, and a CollectiveWatchdog ending it when a rank does
// not arrive in a collective.
// Works under mpirun, srun --mpi=pmix, and as a singleton (one process).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "parallel/collective_watchdog.h"
#include "parallel/peer_watchdog.h"

namespace multiscreen {

class MpiSession {
 public:
  // Initializes MPI, asking for MPI_THREAD_MULTIPLE (the overlapped dp reducer's
  // thread communicates beside the main thread; it checks what MPI gave, through
  // MPI_Query_thread), and starts watching at once (issue 43 §2): the job's first exchange
  // (parallel/start_up_exchange.h, itself timed against `timeout`'s start-up limit), then
  // the peer watchdog and the collective watchdog with `timeout` (every collective after
  // this one, the command's start-up included, is timed). A collective over the world;
  // every rank should pass the same timeout (the command line's --collective_timeout: the
  // run file is not read yet). Errors: MPI already initialized, or initialization failed.
  static absl::StatusOr<std::unique_ptr<MpiSession>> Init(int* argc, char*** argv, CollectiveTimeout timeout = {});
  ~MpiSession();  // stops the watchdogs, then MPI_Finalize
  // The collective watchdog's limits from now on (the run's --collective_timeout, once
  // the ranks agree on the run). Local; no-op where no watchdog runs.
  void SetCollectiveTimeout(CollectiveTimeout timeout);
  // The number of processes in MPI_COMM_WORLD.
  int world_size() const;
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

 private:
  MpiSession() = default;
  std::unique_ptr<PeerWatchdog> watchdog_;
  std::unique_ptr<CollectiveWatchdog> collective_watchdog_;
};

}  // namespace multiscreen
