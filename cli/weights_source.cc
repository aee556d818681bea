#include "cli/weights_source.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/read_retry.h"
#include "checkpoint/streamed_write.h"

namespace multiscreen::cli {

absl::StatusOr<Weights> LoadWeights(const std::string& weights_file, const std::string& checkpoint,
                                    int64_t* checkpoint_step) {
  if (weights_file.empty() == checkpoint.empty()) {
    return absl::InvalidArgumentError("give exactly one of --weights=FILE.h5 and --checkpoint=DIR");
  }
  if (!weights_file.empty()) return ReadWeightsFile(weights_file);
  Weights weights;
  auto read = ReadCheckpointRetrying(checkpoint, [&](const CheckpointRef& ckpt) {
    auto got = ConsolidatedWeights(ckpt);
    if (!got.ok()) return got.status();
    weights = *std::move(got);
    return absl::OkStatus();
  });
  if (!read.ok()) return read.status();
  if (checkpoint_step != nullptr) *checkpoint_step = read->meta.step;
  return weights;
}

absl::StatusOr<StreamedWeights> OpenWeightsStreamed(const std::string& weights_file, const std::string& checkpoint,
                                                      int64_t block_bytes) {
  if (weights_file.empty() == checkpoint.empty()) {
    return absl::InvalidArgumentError("give exactly one of --weights=FILE.h5 and --checkpoint=DIR");
  }
  if (!weights_file.empty()) return OpenWeightsFileStreamed(weights_file, block_bytes);
  // The source opens every file now and reads through those handles: pruning after this
  // point does not reach it (the verification, which reopens them, says so if it must).
  TensorSource source;
  auto ckpt = ReadCheckpointRetrying(checkpoint, [&](const CheckpointRef& ckpt) {
    auto got = CheckpointSource(ckpt);
    if (!got.ok()) return got.status();
    source = *std::move(got);
    return absl::OkStatus();
  });
  if (!ckpt.ok()) return ckpt.status();
  auto ref = std::make_shared<CheckpointRef>(*std::move(ckpt));
  return StreamedWeights{ref->meta.dims, std::move(source),
                         [ref] { return ExplainVanished(*ref, CheckVerified(*ref, /*weights_only=*/true)); }};
}

absl::Status CheckVerified(const CheckpointRef& ckpt, bool weights_only) {
  const std::vector<std::string> problems = VerifyCheckpoint(ckpt, weights_only);
  if (problems.empty()) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(ckpt.dir, ": ", problems.size(), " dataset", problems.size() == 1 ? "" : "s",
                                          " fail verification, first: ", problems.front()));
}

absl::Status CheckWindowFlags(const Weights& weights, bool as_learned) {
  if (as_learned && !weights.dims.screens()) {
    return absl::InvalidArgumentError(absl::StrCat("--as_learned: model ", weights.dims.name,
                                                   " is a Transformer without screening (attention: ",
                                                   AttentionKindName(weights.dims.attention),
                                                   "), which has no learned windows to keep"));
  }
  return absl::OkStatus();
}

}  // namespace multiscreen::cli
