// The held-out windows of a run's validation passes: how many one pass covers (eval.windows,
// or eval.batches micro-batches) and a ValidationLoader over each held-out source. The
// trainer validates over these; `sweep plan` opens and scans them too, so that a grid whose
// runs the trainer would refuse at start (too few held-out windows, a token id past a
// model's vocabulary) is refused before any run starts.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "configs/config.pb.h"
#include "data/loader.h"

namespace multiscreen {

// One held-out source with its loader.
struct ValidationSource {
  std::string name;   // "" for the unnamed held-out data (data.val_shard)
  double weight = 1;  // its share of val_loss (data.val_sources' weight; 1 when unset)
  std::unique_ptr<ValidationLoader> loader;
};

// One validation pass of `run` at data-parallel rank `dp_rank` of `dp`: eval.windows windows
// when set (a promise: the same windows under every layout), else eval.batches micro-batches
// rounded up to a multiple of dp (every replica takes as many) of micro_batch windows each.
ValidationOptions RunValidationOptions(const config::RunConfig& run, int dp, int dp_rank);

// A loader per held-out source of the run: each of `val_sources` (named) when there are any,
// else `val` (unnamed; null: no validation data, an empty result). Errors are
// ValidationLoader::Create's (fewer held-out windows than eval.windows, fewer than dp, a
// shard shorter than seq_len + 1, ...), one line naming the shards and the numbers; for a
// named source prefixed "validation source NAME: ".
absl::StatusOr<std::vector<ValidationSource>> OpenValidation(const config::RunConfig& run,
                                                             const std::vector<LoaderSource>& val_sources,
                                                             std::shared_ptr<const TokenStream> val, int dp,
                                                             int dp_rank);

// Every window of every source's pass (OpenValidation's) against the vocabulary V = `vocab`
// of model `model`: CheckTokenIds' error (trainer/token_ids.h) for the first id outside
// [0, vocab), for a named source prefixed "validation source NAME: ". The trainer scans
// at start (a pass's windows are fixed), and `sweep plan` with each of its models.
absl::Status CheckValidationTokenIds(const std::vector<ValidationSource>& sources, int64_t vocab,
                                     const std::string& model);

}  // namespace multiscreen
