// A peer that dies without leaving the job (SIGKILL, a crash, the OOM killer) must end
// every rank promptly with one line that names it (issue 15 "Tests"), not leave the
// others spinning in a collective until the launcher tears them down with its own
// multi-line box. Each rank watches the other ranks of its node through Linux pidfds
// (poll wakes the moment a watched process exits; where pidfd_open is unavailable,
// /proc is polled every 200 ms) and, when one dies, prints
//   multiscreen: fatal on rank 0 of 2 (host, …): rank 1 (pid 4242, same node) died: killed by signal 9 (SIGKILL); ending the job
// through FatalError, which aborts the job. Of the survivors on that node only the
// lowest-numbered reports at once (the others wait 3 s for it), so that one line
// says it. Peers on other nodes are the launcher's to notice (mpirun ends the job
// when a process of it dies), and so are peers on this node in another pid namespace
// (a container per rank): "the same node" means the same host name, boot id and pid
// namespace, so that a pid is never looked up where it means another process.
// A rank that is stopped (SIGSTOP) or hung, rather than gone, is not noticed: the job
// waits in its collective (NCCL's own timeout aside) until the launcher's time limit.
// Stopped before MPI_Finalize (MpiSession does both), since after it peers may leave.
#pragma once

#include <memory>
#include <vector>

#include "parallel/process_identity.h"

namespace multiscreen {

class PeerWatchdog {
 public:
  // Starts a thread that watches this node's other ranks, given every rank's identity
  // (`ids`, by world rank; parallel/start_up_exchange.h gathers them) and this process's
  // rank. Never fails: a peer that cannot be watched is left to the launcher (and said so
  // on stderr).
  static std::unique_ptr<PeerWatchdog> Start(int rank, const std::vector<ProcessIdentity>& ids);
  // Stops watching; returns once the thread has ended.
  ~PeerWatchdog();
  PeerWatchdog(const PeerWatchdog&) = delete;
  PeerWatchdog& operator=(const PeerWatchdog&) = delete;

  class Impl;

 private:
  explicit PeerWatchdog(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace multiscreen
