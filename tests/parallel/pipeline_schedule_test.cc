// The 1F1B schedule, every stage's operation list run against the others with
// rendezvous semantics (a send completes only when its receiver is waiting for
// it, the strictest MPI_Send/NCCL behaviour): no deadlock, messages carry the
// micro-batch the receiver expects, each micro-batch goes forward then backward
// exactly once per stage, and in-flight slots are never reused too early.
#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "parallel/pipeline_schedule.h"

namespace multiscreen {
namespace {

struct Message {
  int from, to;
  int64_t micro_batch;
};

// One endpoint of a communication in flight: a send or a receive.
struct Part {
  bool send;
  int peer;
  int64_t micro_batch;
  bool done = false;
};

std::vector<Part> PartsOf(const PipeOp& op, int stage) {
  switch (op.kind) {
    case PipeOpKind::kRecvForward: return {{false, stage - 1, op.micro_batch}};
    case PipeOpKind::kSendForward: return {{true, stage + 1, op.micro_batch}};
    case PipeOpKind::kSendForwardRecvBackward:
      return {{true, stage + 1, op.micro_batch}, {false, stage + 1, op.other}};
    case PipeOpKind::kRecvBackward: return {{false, stage + 1, op.micro_batch}};
    case PipeOpKind::kSendBackward: return {{true, stage - 1, op.micro_batch}};
    case PipeOpKind::kSendBackwardRecvForward:
      return {{true, stage - 1, op.micro_batch}, {false, stage - 1, op.other}};
    default: return {};
  }
}

// Runs all stages; returns "" or the first problem found. forward_only: the
// evaluation schedule, one activation slot per stage, freed once the forward's
// output is sent on (or, on the last stage, consumed by the loss).
std::string Simulate(int stages, int64_t M, bool forward_only = false) {
  std::vector<std::vector<PipeOp>> programs(stages);
  for (int s = 0; s < stages; ++s) {
    programs[s] = forward_only ? ForwardOnlySchedule(s, stages, M) : OneFOneBSchedule(s, stages, M);
  }
  std::vector<size_t> pc(stages, 0);
  std::vector<std::vector<Part>> pending(stages);
  std::vector<std::vector<int64_t>> slot_owner(stages);
  std::vector<int64_t> forwards(stages, 0), backwards(stages, 0);
  for (int s = 0; s < stages; ++s) slot_owner[s].assign(forward_only ? 1 : InFlightLimit(s, stages, M), -1);
  auto where = [&](int s) {
    return " (stage " + std::to_string(s) + " of " + std::to_string(stages) + ", M = " + std::to_string(M) + ")";
  };
  // Claims micro-batch m's slot on stage s for an incoming activation or a forward.
  auto claim = [&](int s, int64_t m) -> std::string {
    int64_t& owner = slot_owner[s][m % slot_owner[s].size()];
    if (owner != -1 && owner != m) return "slot of micro-batch " + std::to_string(m) + " still holds " +
                                          std::to_string(owner) + where(s);
    owner = m;
    return "";
  };
  for (;;) {
    bool progress = false, all_done = true;
    // Start the next operation where the current one is finished.
    for (int s = 0; s < stages; ++s) {
      while (pending[s].empty() && pc[s] < programs[s].size()) {
        const PipeOp& op = programs[s][pc[s]++];
        progress = true;
        if (op.kind == PipeOpKind::kForward) {
          if (op.micro_batch != forwards[s]++) return "forward out of order" + where(s);
          if (std::string e = claim(s, op.micro_batch); !e.empty()) return e;
          if (forward_only && s == stages - 1) slot_owner[s][0] = -1;
        } else if (op.kind == PipeOpKind::kBackward) {
          if (op.micro_batch != backwards[s]++) return "backward out of order" + where(s);
          int64_t& owner = slot_owner[s][op.micro_batch % slot_owner[s].size()];
          if (owner != op.micro_batch) return "backward of a micro-batch not in its slot" + where(s);
          owner = -1;
        } else {
          pending[s] = PartsOf(op, s);
          for (const Part& p : pending[s]) {
            if (p.peer < 0 || p.peer >= stages) return "communication with a missing stage" + where(s);
            const bool activation_in = !p.send && p.peer == s - 1;
            if (activation_in) {
              if (std::string e = claim(s, p.micro_batch); !e.empty()) return e;
            }
          }
          // A stage runs its list in order, so the slot is free again once the send is posted.
          if (forward_only && op.kind == PipeOpKind::kSendForward) slot_owner[s][0] = -1;
        }
      }
      if (!pending[s].empty() || pc[s] < programs[s].size()) all_done = false;
    }
    if (all_done) break;
    // Match posted sends with posted receives (rendezvous).
    for (int s = 0; s < stages; ++s) {
      for (Part& send : pending[s]) {
        if (!send.send || send.done) continue;
        for (Part& recv : pending[send.peer]) {
          if (recv.send || recv.done || recv.peer != s) continue;
          if (recv.micro_batch != send.micro_batch) {
            return "stage " + std::to_string(send.peer) + " received micro-batch " + std::to_string(send.micro_batch) +
                   " expecting " + std::to_string(recv.micro_batch) + where(s);
          }
          send.done = recv.done = true;
          progress = true;
          break;
        }
      }
    }
    for (int s = 0; s < stages; ++s) {
      bool done = true;
      for (const Part& p : pending[s]) done = done && p.done;
      if (done) pending[s].clear();
    }
    if (!progress) {
      std::string state = "deadlock:";
      for (int s = 0; s < stages; ++s) {
        state += " stage " + std::to_string(s) + " at " +
                 (pc[s] > 0 ? ToString(programs[s][pc[s] - 1]) : std::string("start")) + ";";
      }
      return state + where(0);
    }
  }
  for (int s = 0; s < stages; ++s) {
    if (forwards[s] != M || backwards[s] != (forward_only ? 0 : M)) return "not every micro-batch ran" + where(s);
  }
  return "";
}

TEST(PipelineScheduleTest, EveryStageCountAndMicroBatchCountRunsWithoutDeadlock) {
  for (int stages = 1; stages <= 8; ++stages) {
    for (int64_t M = 1; M <= 12; ++M) EXPECT_EQ(Simulate(stages, M), "") << stages << " stages, M = " << M;
  }
}

TEST(PipelineScheduleTest, TwoStagesFourMicroBatchesFollowOneForwardOneBackward) {
  auto names = [](int stage) {
    std::string s;
    for (const PipeOp& op : OneFOneBSchedule(stage, 2, 4)) s += ToString(op) + " ";
    return s;
  };
  EXPECT_EQ(names(0), "F0 sendF0 F1 sendF1/recvB0 B0 F2 sendF2/recvB1 B1 F3 sendF3/recvB2 B2 recvB3 B3 ");
  EXPECT_EQ(names(1),
            "recvF0 F0 B0 sendB0/recvF1 F1 B1 sendB1/recvF2 F2 B2 sendB2/recvF3 F3 B3 sendB3 ");
}

TEST(PipelineScheduleTest, ForwardOnlyRunsEveryMicroBatchOnceWithoutDeadlock) {
  for (int stages = 1; stages <= 8; ++stages) {
    for (int64_t M = 1; M <= 6; ++M) EXPECT_EQ(Simulate(stages, M, true), "") << stages << " stages, M = " << M;
  }
  std::string middle;
  for (const PipeOp& op : ForwardOnlySchedule(1, 3, 2)) middle += ToString(op) + " ";
  EXPECT_EQ(middle, "recvF0 F0 sendF0 recvF1 F1 sendF1 ");
}

TEST(PipelineScheduleTest, InFlightMicroBatchesAreBoundedByTheStagesBehind) {
  EXPECT_EQ(InFlightLimit(0, 4, 8), 4);
  EXPECT_EQ(InFlightLimit(3, 4, 8), 1);
  EXPECT_EQ(InFlightLimit(0, 4, 2), 2);
  EXPECT_EQ(InFlightLimit(0, 1, 5), 1);
}

}  // namespace
}  // namespace multiscreen
