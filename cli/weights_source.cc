#include "cli/weights_source.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"

namespace multiscreen::cli {

namespace {

// A run still training replaces its checkpoints: a read that lost its checkpoint to the
// pruning starts over on the newest one, a few times, before it says so.
constexpr int kAttempts = 5;

}  // namespace

absl::StatusOr<Weights> LoadWeights(const std::string& weights_file, const std::string& checkpoint) {
  if (weights_file.empty() == checkpoint.empty()) {
    return absl::InvalidArgumentError("give exactly one of --weights=FILE.h5 and --checkpoint=DIR");
  }
  if (!weights_file.empty()) return ReadWeightsFile(weights_file);
  for (int attempt = 1;; ++attempt) {
    auto ckpt = OpenCheckpointOrRun(checkpoint);
    if (!ckpt.ok()) return ckpt.status();
    auto weights = ConsolidatedWeights(*ckpt);
    if (weights.ok()) return weights;
    if (attempt == kAttempts || !CheckpointVanished(*ckpt)) return ExplainVanished(*ckpt, weights.status());
  }
}

absl::StatusOr<StreamedWeights> OpenWeightsStreamed(const std::string& weights_file, const std::string& checkpoint,
                                                      int64_t block_bytes) {
  if (weights_file.empty() == checkpoint.empty()) {
    return absl::InvalidArgumentError("give exactly one of --weights=FILE.h5 and --checkpoint=DIR");
  }
  if (!weights_file.empty()) return OpenWeightsFileStreamed(weights_file, block_bytes);
  for (int attempt = 1;; ++attempt) {
    auto ckpt = OpenCheckpointOrRun(checkpoint);
    if (!ckpt.ok()) return ckpt.status();
    // The source opens every file now and reads through those handles: pruning after this
    // point does not reach it (the verification, which reopens them, says so if it must).
    auto source = CheckpointSource(*ckpt);
    if (!source.ok()) {
      if (attempt == kAttempts || !CheckpointVanished(*ckpt)) return ExplainVanished(*ckpt, source.status());
      continue;
    }
    auto ref = std::make_shared<CheckpointRef>(*std::move(ckpt));
    return StreamedWeights{ref->meta.dims, *std::move(source),
                           [ref] { return ExplainVanished(*ref, CheckVerified(*ref, /*weights_only=*/true)); }};
  }
}

absl::Status CheckVerified(const CheckpointRef& ckpt, bool weights_only) {
  const std::vector<std::string> problems = VerifyCheckpoint(ckpt, weights_only);
  if (problems.empty()) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(ckpt.dir, ": ", problems.size(), " dataset", problems.size() == 1 ? "" : "s",
                                          " fail verification, first: ", problems.front()));
}

absl::Status CheckWindowFlags(const Weights& weights, bool as_learned) {
  if (as_learned && weights.dims.transformer()) {
    return absl::InvalidArgumentError(absl::StrCat("--as_learned: model ", weights.dims.name,
                                                   " is a Transformer, which has no learned windows to keep"));
  }
  return absl::OkStatus();
}

}  // namespace multiscreen::cli
