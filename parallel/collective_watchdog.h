// A rank that never arrives must not hold the job until its time limit (issue 31 §2).
// A rank stopped by SIGSTOP or a debugger, stuck in a file system call or in a GPU
// kernel, or one that called another operation, leaves its peers waiting in a
// collective for ever; PyTorch's NCCL watchdog and torchtitan end such a job after a
// timeout. So does this one, and it says which rank did not arrive and what it was doing.
//
// Each rank runs a thread over its own duplicate of the world communicator, from MPI_Init
// on (parallel/mpi_session.h; its set-up is parallel/start_up_exchange.h). When this
// rank has waited in one collective longer than the limit (parallel/progress.h's beacon
// says since when and where), the thread asks every other rank what it is doing, gives
// the answers a few seconds, and ends the job with one line:
//   multiscreen: fatal on rank 0 of 2 (host, dp 0, pp 0, tp 0): collective timeout: rank 0
//   waited 5.1 s in AllReduce (step 10, forward/backward for 5.1 s; limit 4 s,
//   --collective_timeout); it waits for rank 1 (host, pid 4242) not answering: stopped
//   (SIGSTOP or a debugger), its last mark: step 10, forward/backward for 5.1 s; ending the job
// A rank that cannot answer is described from /proc and from its beacon when it shares
// this node; from another node, as not answering. Only the lowest-numbered waiting rank
// reports (the others defer to it, and report themselves if it does not end the job).
// The NCCL communicator takes the verdict (progress::TakeVerdict) and aborts its
// communicator (ncclCommAbort) before the job ends; a blocking MPI call cannot be left,
// so there the thread ends the job itself (FatalError, MPI_Abort).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

#include "parallel/process_identity.h"
#include "parallel/progress.h"

namespace multiscreen {

struct CollectiveTimeout {
  double seconds = 600;    // longest wait in one collective (--collective_timeout)
  double long_factor = 3;  // for start-up, the first step, checkpoints and validation
  // The limit for a rank in the state `s` (seconds).
  double LimitFor(const progress::Snapshot& s) const {
    return progress::IsLongPhase(s.phase) || s.steps_here == 0 ? seconds * long_factor : seconds;
  }
};

// One rank's state when the timeout struck.
struct RankReport {
  int rank = 0;
  std::string host;
  int pid = 0;
  bool answered = false;     // it answered the inquiry (its snapshot is its own)
  bool beacon_read = false;  // it did not, and its beacon on this node was read instead
  progress::Snapshot snapshot;
  std::string process_state;  // /proc's words for a rank on this node that did not answer
};

// The verdict line (without "multiscreen: fatal on ..."): who waited where and for how
// long, which ranks did not arrive and why (not answering, busy outside any collective),
// or, when every rank waits, that they wait in different operations. `ranks` holds every
// rank, in rank order; `reporter` is this rank. Pure (tested on its own).
std::string DescribeCollectiveTimeout(const CollectiveTimeout& timeout, int reporter,
                                      const std::vector<RankReport>& ranks);

// "rank 3" or "ranks 0, 2, 5" (at most eight named, then "and N more").
std::string RankList(const std::vector<int>& ranks);

class CollectiveWatchdog {
 public:
  // Starts the thread over `comm`, a duplicate of the world that it takes over (frees),
  // given every rank's identity (`ids`, by rank; parallel/start_up_exchange.h makes both,
  // so that nothing here waits on another rank). A world of one process gets none (nobody
  // to wait for), nor an MPI without MPI_THREAD_MULTIPLE (rank 0 says so): nullptr.
  static std::unique_ptr<CollectiveWatchdog> Start(MPI_Comm comm, std::vector<ProcessIdentity> ids,
                                                   CollectiveTimeout timeout);
  // Replaces the limits from now on (the run's --collective_timeout, once known).
  void SetTimeout(CollectiveTimeout timeout);
  // Stops the thread (before MPI_Finalize).
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  class Impl;

 private:
  explicit CollectiveWatchdog(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace multiscreen
