// The process's MPI lifetime: MPI_Init_thread at start, MPI_Finalize at the end,
// with MPI errors returned to MS_MPI_CHECK (parallel/fatal.h) instead of MPI's
// default handler, uncaught exceptions turned into a job-wide abort, and a
// PeerWatchdog (parallel/peer_watchdog.h) ending the job with one line when a
// rank on this node dies, and on request a CollectiveWatchdog ending it when a rank
// does not arrive in a collective.
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
  // MPI_Query_thread), and starts the peer watchdog (a collective over the world).
  // Errors: MPI already initialized, or initialization failed.
  static absl::StatusOr<std::unique_ptr<MpiSession>> Init(int* argc, char*** argv);
  ~MpiSession();  // stops the watchdogs, then MPI_Finalize
  // Starts the collective watchdog (parallel/collective_watchdog.h): a wait in one
  // collective past `timeout` ends the job naming the rank that did not arrive. A
  // collective over the world; every rank passes the same timeout.
  void StartCollectiveWatchdog(CollectiveTimeout timeout);
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
