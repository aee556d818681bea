// Reading a model one shard at a time (issue 20: `forward --no_grad` of a model
// larger than memory): a weights file as a TensorSource (streamed_write.h), verified
// first without holding it, and any ParamLayout's buffer filled from a TensorSource
// block by block. With CheckpointSource (a checkpoint of any layout) these are the
// loaders of model/streamed_forward.h.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "checkpoint/streamed_write.h"
#include "common/config.h"
#include "model/param_layout.h"

namespace multiscreen {

// A model to be read a shard at a time: its sizes, a source of its tensors (read
// without checks) and the check of everything the source will read, to run before
// reading (it reads the whole model once, block by block; minutes at Ψ = 64), after
// whatever can be refused from the sizes alone.
struct StreamedWeights {
  ModelDims dims;
  TensorSource source;
  std::function<absl::Status()> verify;
};

// A consolidated weights file (weights_file.h's format), its model sizes read and
// checked on opening; `verify` checks the rest of what ReadWeightsFile checks —
// every dataset's shape and storage, every value finite, the params_crc32c of all
// parameters (absent in old files: unchecked) — `block_bytes` at a time, never the
// whole model in memory. Errors name the file and dataset, as ReadWeightsFile's.
absl::StatusOr<StreamedWeights> OpenWeightsFileStreamed(const std::string& path, int64_t block_bytes);

// Fills params [layout.size()] with the tensors of layout's shard (each entry's rows
// [offset[0], offset[0] + shape[0]) of its global tensor) from `source`, at most
// `block_bytes` of fp32 at a time (converted to Real). Errors: the source's.
template <typename Real>
absl::Status FillShardParams(const TensorSource& source, const ParamLayout& layout, int64_t block_bytes,
                             Real* params);

}  // namespace multiscreen
