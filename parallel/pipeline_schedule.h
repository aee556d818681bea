// The 1F1B pipeline schedule (PipeDream-Flush, as in Megatron-LM): each stage
// runs a warm-up of forwards, then alternates one forward with one backward,
// then drains the remaining backwards. At most min(stages − stage, M)
// micro-batches are in flight on a stage. Pure: the executor is
// parallel/pipeline.h; tests simulate every stage's list against each other.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace multiscreen {

enum class PipeOpKind {
  kRecvForward,              // x[m] ← stage − 1
  kForward,                  // micro-batch m forward (first stage embeds; last computes loss and dx)
  kSendForward,              // x[m] → stage + 1
  kSendForwardRecvBackward,  // x[m] → stage + 1 while dx[other] ← stage + 1
  kRecvBackward,             // dx[m] ← stage + 1
  kBackward,                 // micro-batch m backward
  kSendBackward,             // dx[m] → stage − 1
  kSendBackwardRecvForward,  // dx[m] → stage − 1 while x[other] ← stage − 1
};

struct PipeOp {
  PipeOpKind kind;
  int64_t micro_batch;
  int64_t other = -1;  // the micro-batch received by the combined operations
};

// The operations of `stage` (0-based, of `stages`) for M = micro_batches ≥ 1,
// in order. Communication with a missing neighbour (before the first stage,
// after the last) is left out.
std::vector<PipeOp> OneFOneBSchedule(int stage, int stages, int64_t micro_batches);

// Forwards only (evaluation: no backward, no gradients): each micro-batch is
// received, run and sent on before the next, so one activation slot suffices.
std::vector<PipeOp> ForwardOnlySchedule(int stage, int stages, int64_t micro_batches);

// Micro-batches in flight at most on `stage`: min(stages − stage, M). Micro-batch
// m uses activation slot m mod this.
int64_t InFlightLimit(int stage, int stages, int64_t micro_batches);

// "F3", "B0", "sendF2/recvB0", ... for messages and debugging.
std::string ToString(const PipeOp& op);

}  // namespace multiscreen
