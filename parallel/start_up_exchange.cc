// The job's first exchange, watched (start_up_exchange.h).
#include "parallel/start_up_exchange.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "parallel/fatal.h"
#include "parallel/progress.h"

namespace multiscreen {
namespace {

// Tags of this exchange's messages on the world communicator (nothing else sends there).
constexpr int kHelloTag = 0x4d53;      // a rank's identity, to rank 0
constexpr int kTableTag = 0x4d53 + 1;  // every rank's identities, from rank 0

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Polls `requests` until all complete or `deadline`; true when all completed. Requests
// that completed become MPI_REQUEST_NULL; the others stay pending.
bool WaitUntil(std::vector<MPI_Request>& requests, Clock::time_point deadline) {
  for (int pause_us = 50;; pause_us = std::min(pause_us * 2, 20000)) {
    int all = 0;
    MS_MPI_CHECK(MPI_Testall(int(requests.size()), requests.data(), &all, MPI_STATUSES_IGNORE));
    if (all) return true;
    if (Clock::now() > deadline) {
      // Testall leaves completed requests alone when not all are: retire them one by one.
      for (MPI_Request& r : requests) {
        int done = 0;
        if (r != MPI_REQUEST_NULL) MS_MPI_CHECK(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
      }
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
  }
}

}  // namespace

StartUpExchange ExchangeAtStartUp(MPI_Comm world, const CollectiveTimeout& timeout) {
  const Clock::time_point t0 = Clock::now();
  int rank = 0, size = 1;
  MS_MPI_CHECK(MPI_Comm_rank(world, &rank));
  MS_MPI_CHECK(MPI_Comm_size(world, &size));
  StartUpExchange out;
  out.ids.resize(size);
  out.ids[rank] = SelfIdentity();
  MPI_Request dup = MPI_REQUEST_NULL;
  MS_MPI_CHECK(MPI_Comm_idup(world, &out.comm, &dup));
  if (size == 1) {
    MS_MPI_CHECK(MPI_Wait(&dup, MPI_STATUS_IGNORE));
    return out;
  }
  const progress::Snapshot start_up;  // the start-up phase, before any step
  const double limit_s = timeout.LimitFor(start_up);
  // Another rank waits for rank 0 this much longer, so that rank 0, which knows who is
  // missing, speaks first.
  const double grace_s = 2 * std::clamp(timeout.seconds / 4, 1.0, 10.0) + 2;
  const Clock::time_point deadline = t0 + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(rank == 0 ? limit_s : limit_s + grace_s));
  const std::string limit = absl::StrFormat("limit %g s: %g × --collective_timeout in start-up", limit_s,
                                            timeout.long_factor);
  const int bytes = int(sizeof(ProcessIdentity));
  std::vector<MPI_Request> requests;
  if (rank == 0) {
    requests.assign(size - 1, MPI_REQUEST_NULL);
    for (int r = 1; r < size; ++r) {
      MS_MPI_CHECK(MPI_Irecv(&out.ids[r], bytes, MPI_BYTE, r, kHelloTag, world, &requests[r - 1]));
    }
    if (!WaitUntil(requests, deadline)) {
      std::vector<int> missing;
      for (int r = 1; r < size; ++r) {
        if (requests[r - 1] != MPI_REQUEST_NULL) missing.push_back(r);
      }
      FatalError(absl::StrFormat(
          "start-up: rank 0 waited %.1f s after MPI_Init for %s (%s); %s never reached the job's first exchange "
          "(stopped, hung, or its host unreachable); ending the job",
          SecondsSince(t0), RankList(missing), limit, RankList(missing)));
    }
    requests.assign(size - 1, MPI_REQUEST_NULL);
    for (int r = 1; r < size; ++r) {
      MS_MPI_CHECK(MPI_Isend(out.ids.data(), bytes * size, MPI_BYTE, r, kTableTag, world, &requests[r - 1]));
    }
  } else {
    requests.assign(2, MPI_REQUEST_NULL);
    MS_MPI_CHECK(MPI_Isend(&out.ids[rank], bytes, MPI_BYTE, 0, kHelloTag, world, &requests[0]));
    MS_MPI_CHECK(MPI_Irecv(out.ids.data(), bytes * size, MPI_BYTE, 0, kTableTag, world, &requests[1]));
  }
  // Rank 0's table sends, or this rank's hello and the table it waits for.
  if (!WaitUntil(requests, deadline) && rank != 0 && requests[1] != MPI_REQUEST_NULL) {
    FatalError(absl::StrFormat("start-up: rank %d waited %.1f s after MPI_Init for rank 0 (%s); rank 0 not answering "
                               "in the job's first exchange (stopped, hung, or its host unreachable); ending the job",
                               rank, SecondsSince(t0), limit));
  }
  // Every rank has arrived (rank 0 heard from all; this rank got rank 0's table): the rest
  // takes moments, given the grace at least even when the last rank came just before the
  // limit.
  std::vector<MPI_Request> rest = requests;
  rest.push_back(dup);
  if (!WaitUntil(rest, std::max(deadline, Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                             std::chrono::duration<double>(grace_s))))) {
    // One stopped since it arrived shows in /proc when it shares this node.
    std::vector<std::string> stuck;
    for (int r = 0; r < size; ++r) {
      if (r == rank || !SamePidSpace(out.ids[r], out.ids[rank])) continue;
      const std::string state = ProcessStateInWords(out.ids[r].pid);
      if (state != "running" && state != "sleeping") {
        stuck.push_back(absl::StrCat("rank ", r, " (pid ", out.ids[r].pid, ") ", state));
      }
    }
    FatalError(absl::StrFormat("start-up: rank %d waited %.1f s after MPI_Init in the job's first exchange (%s): every "
                               "rank arrived but it did not complete%s%s; ending the job",
                               rank, SecondsSince(t0), limit, stuck.empty() ? "" : ": ", absl::StrJoin(stuck, "; ")));
  }
  return out;
}

}  // namespace multiscreen
