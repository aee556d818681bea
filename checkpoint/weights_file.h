// The consolidated weights file: what `multiscreen init` and `ckpt export`
// write and `forward --weights` reads. Root attributes give the model sizes
// (format = "multiscreen-weights", format_version = 1, name, n_layers, n_heads,
// d_e, d_k, d_v, vocab, w_th, pl_norm, eos_token, and params_crc32c: the CRC-32C
// of all parameters' fp32 bytes in ParamLayout order); one fp32 dataset per
// parameter under its logical name, with its full global shape.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/h5_file.h"
#include "common/config.h"
#include "model/param_layout.h"

namespace multiscreen {

struct Weights {
  ModelDims dims;
  std::vector<float> params;  // in the order of ParamLayout(dims, ShardSpec::Full(dims))
};

// Writes the model sizes as root attributes of `out`.
absl::Status WriteModelDims(H5Writer& out, const ModelDims& dims);
// Reads them back; errors name the file and attribute.
absl::StatusOr<ModelDims> ReadModelDims(const H5Reader& in);

// Writes a full-layout parameter buffer to `path` (atomically).
absl::Status WriteWeightsFile(const std::string& path, const ParamLayout& full, const float* params);

// Reads `path`. Errors: not a weights file, a missing dataset or one of the
// wrong shape (both named with the file), parameters that fail params_crc32c
// (DataLoss; files without the attribute load unchecked).
absl::StatusOr<Weights> ReadWeightsFile(const std::string& path);

}  // namespace multiscreen
