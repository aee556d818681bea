// Where a command's model weights come from: --weights=FILE.h5 (a consolidated
// weights file) or --checkpoint=DIR (a checkpoint or run directory, any layout).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/streamed_read.h"
#include "checkpoint/weights_file.h"

namespace multiscreen::cli {

// Exactly one of the two must be given; errors name the flag, file or dataset.
// `checkpoint_step`, when given, receives the step of the checkpoint the weights came
// from (of a live run: the one read, not whatever is newest afterwards); untouched for
// a weights file.
absl::StatusOr<Weights> LoadWeights(const std::string& weights_file, const std::string& checkpoint,
                                    int64_t* checkpoint_step = nullptr);

// The same choice for a command that reads the model a shard at a time (forward
// --no_grad): the model's sizes and a TensorSource over the weights file or the
// checkpoint (any layout); its `verify` checks, block by block (`block_bytes`),
// everything the source will read: a weights file's datasets and params_crc32c
// (OpenWeightsFileStreamed), a checkpoint's weight datasets against the manifest's
// checksums (CheckVerified).
absl::StatusOr<StreamedWeights> OpenWeightsStreamed(const std::string& weights_file, const std::string& checkpoint,
                                                      int64_t block_bytes);

// VerifyCheckpoint's problems as one error naming the checkpoint, the count and the
// first ("DIR: N datasets fail verification, first: ..."); OK when there are none.
absl::Status CheckVerified(const CheckpointRef& ckpt, bool weights_only);

// The inference window rule's flags against the loaded model: --as_learned keeps
// Multiscreen's learned windows (spec "Inference"); a Transformer has none, so the flag
// is refused for it in one line rather than silently ignored.
absl::Status CheckWindowFlags(const Weights& weights, bool as_learned);

}  // namespace multiscreen::cli
