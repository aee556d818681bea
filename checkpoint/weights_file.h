// The consolidated weights file: what `multiscreen init` and `ckpt export`
// write and `forward --weights` reads. Root attributes give the model sizes
// (format = "multiscreen-weights", format_version = 1, name, n_layers, n_heads,
// d_e, d_k, d_v, vocab, w_th, pl_norm, eos_token, family, the family's own switches
// (a Transformer's qk_norm, sio, attention; a Multiscreen's tanh_norm, position,
// output_gate: files written before issue 43 hold both families' switches, the other
// family's at their defaults, and still read), and params_crc32c: the CRC-32C of all
// parameters' fp32 bytes in ParamLayout order); one fp32 dataset per parameter under its
// logical name, with its full global shape. Nothing else.
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
// Reads them back; errors name the file and attribute. Every attribute must
// have its type (an integer size, a number w_th, a string name) and the sizes
// pass CheckModelDims; format_version must be 1. Refused too: a root attribute a weights
// file does not have; a switch attribute missing though the file has one that files
// gained after it (family, qk_norm, sio; tanh_norm; attention; position, output_gate: a
// file written before a switch lacks it and all later ones, and reads as their defaults;
// a file without the other family's switches is checked on its family's own); the other
// family's switch at a value other than its default.
absl::StatusOr<ModelDims> ReadModelDims(const H5Reader& in);

// Refuses a dataset of `in` that is not a parameter of `full` (the file's own model, read
// by ReadModelDims): e.g. s_w of a file whose attention attribute was removed.
absl::Status CheckWeightsFileDatasets(const H5Reader& in, const ParamLayout& full);

// Model sizes read from a file (a weights file's attributes, a manifest's
// "model"), checked before anything is sized from them: N_L, N_H in [1, 2^16],
// d_E, d_V in [1, 2^20], d_K in [2, 2^20], V in [1, 2^31 − 1] (token ids are
// int32), w_th finite and positive, eos_token in [0, V), a name of at most 256
// characters and no control characters; a Transformer's d_k = d_e / n_heads (whole,
// even), d_v = d_k and w_th the default 256 (model files cannot set either), no
// Transformer switch on a Multiscreen. `source` names the
// file, `field` the prefix of the field names ("model." in a manifest).
absl::Status CheckModelDims(const ModelDims& dims, const std::string& source, const std::string& field);

// Checks dataset `name` of `in` before it is read: an HDF5 float dataset of
// exactly `shape`, with every element stored in the file (a dataset whose
// chunks were never written reads as fill values: refused). With
// allow_zero_fill (checkpoints, whose manifest has a CRC-32C of every dataset:
// issue 20), chunks never written are accepted when the dataset declares the
// fill value 0 (H5Writer::CreateRows, the streamed writers' all-zero blocks):
// they read as exactly 0, and the checksum, computed over what is read, treats
// them as written zeros. Errors name the file and dataset.
absl::Status CheckDatasetHolds(const H5Reader& in, const std::string& name, const std::vector<int64_t>& shape,
                               bool allow_zero_fill = false);

// Refuses NaN and ±inf: "<path>: dataset <name> holds a non-finite value (nan)
// at element i". A model cannot start or resume from one.
absl::Status CheckFinite(const float* data, int64_t n, const std::string& path, const std::string& dataset);

// Writes a full-layout parameter buffer to `path` (atomically).
absl::Status WriteWeightsFile(const std::string& path, const ParamLayout& full, const float* params);

// Reads `path`. Errors: not a weights file, model sizes that fail
// CheckModelDims or need more bytes than the file has, a missing dataset or one
// that fails CheckDatasetHolds (named with the file), a dataset that is not a parameter
// (CheckWeightsFileDatasets), a non-finite parameter,
// parameters that fail params_crc32c (DataLoss; files without the attribute
// load unchecked; one that is not an integer in [0, 2^32) is an error).
absl::StatusOr<Weights> ReadWeightsFile(const std::string& path);

// The file's params_crc32c root attribute (the CRC-32C of all parameters in the full
// layout's order), or −1 where it is absent (files written before it). Errors name the
// file: an attribute of another type, or outside [0, 2^32 − 1].
absl::StatusOr<int64_t> StoredParamsCrc(const H5Reader& in);

}  // namespace multiscreen
