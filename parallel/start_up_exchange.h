// The job's first exchange, watched (issue 43 §2). The watchdogs (parallel/peer_watchdog.h,
// parallel/collective_watchdog.h) need every rank's identity and a communicator of their
// own before they can time anything; made with blocking collectives, that set-up was
// itself unwatched, and a rank stopped (SIGSTOP) right after MPI_Init left the others in
// it for ever. Here it is made with non-blocking operations polled against the start-up
// limit, and a rank that has not arrived by then is named in one line.
#pragma once

#include <vector>

#include <mpi.h>

#include "parallel/collective_watchdog.h"
#include "parallel/process_identity.h"

namespace multiscreen {

struct StartUpExchange {
  std::vector<ProcessIdentity> ids;  // every rank's identity, indexed by rank in the world
  MPI_Comm comm = MPI_COMM_NULL;     // a duplicate of the world, the caller's to free
};

// Collective over `world`, the first one after MPI_Init: MPI_Comm_idup of `world`, then
// every rank's identity gathered by rank 0 and sent back to all (point-to-point on `world`
// under two tags of its own), each polled against timeout.LimitFor(start-up) (3 ×
// --collective_timeout). Past it the job ends (FatalError) with one line naming who did
// not arrive: rank 0 names the ranks it has not heard from; another rank gives rank 0 a
// few seconds more to say so, then names rank 0 (not answering); when every rank arrived
// but the duplicate does not complete, the ranks of this node that /proc finds stopped or
// in uninterruptible sleep. A world of one process returns at once.
StartUpExchange ExchangeAtStartUp(MPI_Comm world, const CollectiveTimeout& timeout);

}  // namespace multiscreen
