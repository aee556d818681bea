// Where a command's model weights come from: --weights=FILE.h5 (a consolidated
// weights file) or --checkpoint=DIR (a checkpoint or run directory, any layout).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "checkpoint/weights_file.h"

namespace multiscreen::cli {

// Exactly one of the two must be given; errors name the flag, file or dataset.
absl::StatusOr<Weights> LoadWeights(const std::string& weights_file, const std::string& checkpoint);

// The inference window rule's flags against the loaded model: --as_learned keeps
// Multiscreen's learned windows (spec "Inference"); a Transformer has none, so the flag
// is refused for it in one line rather than silently ignored.
absl::Status CheckWindowFlags(const Weights& weights, bool as_learned);

}  // namespace multiscreen::cli
