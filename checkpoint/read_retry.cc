#include "checkpoint/read_retry.h"

#include <filesystem>

#include "absl/strings/str_cat.h"

namespace multiscreen {

bool CheckpointVanished(const CheckpointRef& ckpt) {
  std::error_code ec;
  return !std::filesystem::exists(std::filesystem::path(ckpt.dir) / "manifest.json", ec);
}

absl::Status ExplainVanished(const CheckpointRef& ckpt, absl::Status status) {
  if (status.ok() || !CheckpointVanished(ckpt)) return status;
  return absl::FailedPreconditionError(absl::StrCat(
      ckpt.dir, ": the checkpoint was removed while it was being read (a run still training replaces its checkpoints: "
      "checkpoint.keep_last); nothing says it was corrupt: run again on the newer one, copy the checkpoint first, or "
      "read a weights file from `ckpt export` (the read failed with: ", status.message(), ")"));
}

absl::StatusOr<CheckpointRef> ReadCheckpointRetrying(const std::string& path,
                                                     const std::function<absl::Status(const CheckpointRef&)>& read,
                                                     int attempts) {
  for (int attempt = 1;; ++attempt) {
    auto ckpt = OpenCheckpointOrRun(path, /*lock_for_reading=*/true);
    if (!ckpt.ok()) return ckpt.status();
    const absl::Status status = read(*ckpt);
    if (status.ok()) return ckpt;
    if (attempt >= attempts || !CheckpointVanished(*ckpt)) return ExplainVanished(*ckpt, status);
  }
}

}  // namespace multiscreen
