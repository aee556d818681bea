// The readers' side of a live run's checkpoints (issue 31): a checkpoint a reader opened
// can be pruned under it by the run's keep_last (a pruner that does not take the reader's
// lock: an older build, a person). These say so instead of reporting what reads as
// corruption, and start the read over on the newest checkpoint. (The writers are in
// streamed_write.h, the lock and the listing in checkpoint.h.)
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"

namespace multiscreen {

// `status` when OK or when `ckpt`'s directory still holds its manifest; otherwise an
// error saying the checkpoint was removed while being read (a live run's keep_last
// replaced it), with `status` as the cause, instead of a failure that reads as
// corruption (issue 31, "Smaller": forward --no_grad on a training run).
absl::Status ExplainVanished(const CheckpointRef& ckpt, absl::Status status);
// Whether `ckpt`'s directory no longer holds its manifest (pruned under a reader).
bool CheckpointVanished(const CheckpointRef& ckpt);

// Opens `path` (a checkpoint, or a run directory: its newest checkpoint that verifies,
// OpenCheckpointOrRun, holding the reader's lock from before its first byte is read:
// the returned ref's `reading`, and the run's pruning keeps the checkpoint while it is
// held) and runs `read` on it. When `read` fails and the checkpoint has been removed
// all the same (a pruner that does not take the lock: an older build, a person), the
// whole read starts over on the newest one, at most
// `attempts` times in all, and then says it was removed (ExplainVanished) rather than
// report what reads as corruption. Returns the checkpoint `read` succeeded on. Errors:
// OpenCheckpointOrRun's; `read`'s own when its checkpoint is still there.
// Used by every command that reads a checkpoint it did not write (forward, eval,
// generate, ckpt export/reshard/inspect).
absl::StatusOr<CheckpointRef> ReadCheckpointRetrying(const std::string& path,
                                                     const std::function<absl::Status(const CheckpointRef&)>& read,
                                                     int attempts = 5);

}  // namespace multiscreen
