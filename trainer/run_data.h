// The data section of a run file (configs/config.proto DataConfig) opened as the
// trainer's sources: one corpus (train_shards, val_shard) or a weighted mixture of
// named sources (sources, val_sources), each path in its token format (data/loader.h).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/config.h"
#include "configs/config.pb.h"
#include "trainer/trainer.h"

namespace multiscreen {

// Opens the token files `run.data()` names. Errors are one line naming the field
// (through `source`: the run file or the flag that set it) or the file: train_shards and
// sources both set (or val_shard and val_sources), a source without paths, two sources
// of one name, a name that is not a metrics key ([A-Za-z0-9_.-]+), a weight that is
// negative or not finite, train weights that sum to zero, and every error of opening
// the files (data/loader.h). A val_shard directory without val_*.bin turns validation
// off with a warning (prepare --val_tokens=0), as before; `logger` says whether to warn.
absl::StatusOr<Trainer::Sources> OpenRunData(const config::RunConfig& run, const RunSource& source, bool logger);

}  // namespace multiscreen
