#include "cli/weights_source.h"

#include "absl/strings/str_cat.h"
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

absl::Status CheckWindowFlags(const Weights& weights, bool as_learned) {
  if (as_learned && weights.dims.transformer()) {
    return absl::InvalidArgumentError(absl::StrCat("--as_learned: model ", weights.dims.name,
                                                   " is a Transformer, which has no learned windows to keep"));
  }
  return absl::OkStatus();
}

}  // namespace multiscreen::cli
