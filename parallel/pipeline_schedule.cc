#include "parallel/pipeline_schedule.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace multiscreen {

int64_t InFlightLimit(int stage, int stages, int64_t micro_batches) {
  return std::min<int64_t>(stages - stage, micro_batches);
}

std::vector<PipeOp> OneFOneBSchedule(int stage, int stages, int64_t micro_batches) {
  const bool first = stage == 0, last = stage == stages - 1;
  const int64_t M = micro_batches;
  const int64_t warmup = std::min<int64_t>(stages - stage - 1, M);
  const int64_t remaining = M - warmup;
  std::vector<PipeOp> ops;
  auto add = [&](bool present, PipeOpKind kind, int64_t m, int64_t other = -1) {
    if (present) ops.push_back({kind, m, other});
  };
  for (int64_t m = 0; m < warmup; ++m) {
    add(!first, PipeOpKind::kRecvForward, m);
    add(true, PipeOpKind::kForward, m);
    add(!last, PipeOpKind::kSendForward, m);
  }
  if (remaining > 0) add(!first, PipeOpKind::kRecvForward, warmup);
  for (int64_t i = 0; i < remaining; ++i) {
    const int64_t f = warmup + i;
    add(true, PipeOpKind::kForward, f);
    add(!last, PipeOpKind::kSendForwardRecvBackward, f, i);
    add(true, PipeOpKind::kBackward, i);
    if (i == remaining - 1) {
      add(!first, PipeOpKind::kSendBackward, i);
    } else {
      add(!first, PipeOpKind::kSendBackwardRecvForward, i, f + 1);
    }
  }
  for (int64_t i = remaining; i < M; ++i) {
    add(!last, PipeOpKind::kRecvBackward, i);
    add(true, PipeOpKind::kBackward, i);
    add(!first, PipeOpKind::kSendBackward, i);
  }
  return ops;
}

std::vector<PipeOp> ForwardOnlySchedule(int stage, int stages, int64_t micro_batches) {
  std::vector<PipeOp> ops;
  for (int64_t m = 0; m < micro_batches; ++m) {
    if (stage > 0) ops.push_back({PipeOpKind::kRecvForward, m});
    ops.push_back({PipeOpKind::kForward, m});
    if (stage < stages - 1) ops.push_back({PipeOpKind::kSendForward, m});
  }
  return ops;
}

std::string ToString(const PipeOp& op) {
  switch (op.kind) {
    case PipeOpKind::kRecvForward: return absl::StrCat("recvF", op.micro_batch);
    case PipeOpKind::kForward: return absl::StrCat("F", op.micro_batch);
    case PipeOpKind::kSendForward: return absl::StrCat("sendF", op.micro_batch);
    case PipeOpKind::kSendForwardRecvBackward: return absl::StrCat("sendF", op.micro_batch, "/recvB", op.other);
    case PipeOpKind::kRecvBackward: return absl::StrCat("recvB", op.micro_batch);
    case PipeOpKind::kBackward: return absl::StrCat("B", op.micro_batch);
    case PipeOpKind::kSendBackward: return absl::StrCat("sendB", op.micro_batch);
    case PipeOpKind::kSendBackwardRecvForward: return absl::StrCat("sendB", op.micro_batch, "/recvF", op.other);
  }
  return "?";
}

}  // namespace multiscreen
