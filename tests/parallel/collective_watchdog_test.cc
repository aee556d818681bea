// The collective watchdog's verdict line (parallel/collective_watchdog.h, issue 31 §2)
// and the progress beacon it reads (parallel/progress.h): which rank held the collective
// up and why, for a stopped rank, a busy one, one on another node, and ranks that wait
// on each other; the long limit for start-up, first steps and checkpoints. The job-level
// test (a SIGSTOPped rank under mpirun) is tests/parallel/kill_rank_test.py.
#include <gtest/gtest.h>

#include <thread>

#include "parallel/collective_watchdog.h"
#include "parallel/progress.h"

namespace multiscreen {
namespace {

using progress::Collective;
using progress::Phase;
using progress::Snapshot;

Snapshot Waiting(int64_t step, double seconds, Collective op = Collective::kAllReduce) {
  Snapshot s;
  s.step = step;
  s.steps_here = step;
  s.phase = Phase::kForwardBackward;
  s.phase_seconds = seconds + 0.5;
  s.waiting = true;
  s.collective = op;
  s.wait_seconds = seconds;
  return s;
}

RankReport Rank(int rank, Snapshot s, bool answered = true) {
  RankReport r;
  r.rank = rank;
  r.host = rank < 2 ? "node-a" : "node-b";
  r.pid = 100 + rank;
  r.answered = answered;
  r.snapshot = s;
  return r;
}

TEST(CollectiveWatchdogTest, NamesAStoppedRankOnThisNodeWithItsLastMark) {
  RankReport stopped = Rank(1, Waiting(9, 4.0), /*answered=*/false);
  stopped.beacon_read = true;
  stopped.snapshot.waiting = false;
  stopped.snapshot.phase = Phase::kSavingCheckpoint;
  stopped.snapshot.phase_seconds = 7.25;
  stopped.process_state = "stopped (SIGSTOP or a debugger)";
  const std::string line = DescribeCollectiveTimeout({.seconds = 5}, 0, {Rank(0, Waiting(9, 6.0)), stopped});
  EXPECT_EQ(line,
            "collective timeout: rank 0 waited 6.0 s in AllReduce (step 10, forward/backward for 6.5 s; limit 5 s, "
            "--collective_timeout); it waits for rank 1 (node-a, pid 101) not answering: stopped (SIGSTOP or a "
            "debugger), its last mark: saving a checkpoint after step 9 for 7.2 s; ending the job");
}

TEST(CollectiveWatchdogTest, NamesABusyRankByWhatItAnswered) {
  Snapshot busy;
  busy.step = 41;
  busy.steps_here = 41;
  busy.phase = Phase::kReadingData;
  busy.phase_seconds = 612.0;
  const std::string line = DescribeCollectiveTimeout(
      {.seconds = 600}, 0, {Rank(0, Waiting(41, 601)), Rank(1, Waiting(41, 601.5)), Rank(2, busy), Rank(3, Waiting(41, 600.2))});
  EXPECT_NE(line.find("collective timeout: ranks 0, 1, 3 waited 601.0 s in AllReduce (step 42, forward/backward"),
            std::string::npos) << line;
  EXPECT_NE(line.find("it waits for rank 2 (node-b, pid 102) busy outside any collective: step 42, reading the "
                      "batch for 612.0 s; ending the job"),
            std::string::npos) << line;
}

TEST(CollectiveWatchdogTest, ARankOnAnotherNodeThatCannotAnswerIsSaidSo) {
  RankReport far = Rank(2, Snapshot(), /*answered=*/false);
  const std::string line = DescribeCollectiveTimeout({.seconds = 5}, 1, {Rank(0, Waiting(3, 6)), Rank(1, Waiting(3, 6)), far});
  EXPECT_NE(line.find("it waits for rank 2 (node-b, pid 102) not answering (stopped, hung, or its host unreachable); "
                      "ending the job"),
            std::string::npos) << line;
  EXPECT_EQ(line.find("last mark"), std::string::npos) << line;  // nothing read, nothing claimed
}

TEST(CollectiveWatchdogTest, RanksThatAllWaitAreSaidToWaitOnEachOther) {
  const std::string line = DescribeCollectiveTimeout(
      {.seconds = 5}, 0, {Rank(0, Waiting(7, 6, Collective::kAllReduce)), Rank(1, Waiting(7, 6, Collective::kRecv))});
  EXPECT_NE(line.find("every rank waits in a collective (limit 5 s, --collective_timeout): ranks 0 in AllReduce "
                      "(step 8, forward/backward for 6.5 s, waiting in AllReduce for 6.0 s); 1 in Recv"),
            std::string::npos) << line;
  EXPECT_NE(line.find("they called different operations or wait on each other"), std::string::npos) << line;
}

TEST(CollectiveWatchdogTest, ManyAbsentRanksAreCountedNotListed) {
  std::vector<RankReport> ranks{Rank(0, Waiting(1, 9))};
  for (int r = 1; r < 20; ++r) ranks.push_back(Rank(r, Snapshot(), false));
  const std::string line = DescribeCollectiveTimeout({.seconds = 5}, 0, ranks);
  EXPECT_NE(line.find("rank 4 (node-b, pid 104)"), std::string::npos) << line;
  EXPECT_EQ(line.find("rank 5 ("), std::string::npos) << line;
  EXPECT_NE(line.find("and 15 more ranks; ending the job"), std::string::npos) << line;
}

TEST(CollectiveWatchdogTest, StartUpFirstStepsCheckpointsAndValidationGetTheLongLimit) {
  const CollectiveTimeout t{.seconds = 10, .long_factor = 3};
  Snapshot s = Waiting(5, 1);
  EXPECT_EQ(t.LimitFor(s), 10);
  s.steps_here = 0;  // resumed at step 5: its first step here
  EXPECT_EQ(t.LimitFor(s), 30);
  s.steps_here = 2;
  for (Phase p : {Phase::kStartUp, Phase::kLoadingCheckpoint, Phase::kValidation, Phase::kSavingCheckpoint}) {
    s.phase = p;
    EXPECT_EQ(t.LimitFor(s), 30) << progress::PhaseName(p);
  }
  for (Phase p : {Phase::kReadingData, Phase::kForwardBackward, Phase::kOptimizer, Phase::kLogging}) {
    s.phase = p;
    EXPECT_EQ(t.LimitFor(s), 10) << progress::PhaseName(p);
  }
  s.phase = Phase::kSavingCheckpoint;
  const std::string line = DescribeCollectiveTimeout(t, 0, {Rank(0, s), Rank(1, Snapshot(), false)});
  EXPECT_NE(line.find("limit 30 s: 3 × --collective_timeout in start-up"), std::string::npos) << line;
}

TEST(ProgressBeaconTest, TimesTheOldestWaitAcrossNestedScopesAndThreads) {
  progress::SetStep(3, 1);
  progress::SetPhase(Phase::kForwardBackward);
  EXPECT_FALSE(progress::Read(progress::Self(), progress::MonotonicNs()).waiting);
  {
    const progress::CollectiveWait outer(Collective::kSendRecv);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    std::thread other([] { const progress::CollectiveWait inner(Collective::kBarrier); });
    other.join();
    const Snapshot s = progress::Read(progress::Self(), progress::MonotonicNs());
    EXPECT_TRUE(s.waiting);
    EXPECT_EQ(s.collective, Collective::kSendRecv);
    EXPECT_GE(s.wait_seconds, 0.03);
    EXPECT_EQ(s.step, 3);
    EXPECT_EQ(progress::Describe(s, false).rfind("step 4, forward/backward for ", 0), 0u) << progress::Describe(s);
  }
  EXPECT_FALSE(progress::Read(progress::Self(), progress::MonotonicNs()).waiting);
  // The beacon is in a memfd, so that a peer on this node can read it while we are stopped.
  EXPECT_GE(progress::SelfFd(), 0);
}

}  // namespace
}  // namespace multiscreen
