#include "cli/weights_source.h"

#include "checkpoint/checkpoint.h"

namespace multiscreen::cli {

absl::StatusOr<Weights> LoadWeights(const std::string& weights_file, const std::string& checkpoint) {
  if (weights_file.empty() == checkpoint.empty()) {
    return absl::InvalidArgumentError("give exactly one of --weights=FILE.h5 and --checkpoint=DIR");
  }
  if (!weights_file.empty()) return ReadWeightsFile(weights_file);
  auto ckpt = OpenCheckpointOrRun(checkpoint);
  if (!ckpt.ok()) return ckpt.status();
  return ConsolidatedWeights(*ckpt);
}

}  // namespace multiscreen::cli
