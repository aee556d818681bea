// Streamed writers for checkpoints and weights files (issue 20): the files of
// any layout are written block by block from a TensorSource, so that memory is
// bounded by one block (--memory), not by the model. `init`, `ckpt init`,
// `ckpt reshard` and `ckpt export` are these writers over the initialization
// function or an existing checkpoint.
//
// Every dataset is an HDF5 chunked dataset (one chunk per block of rows) that
// declares the fill value 0 (H5Writer::CreateRows). In a checkpoint a block
// whose bits are all zero (step-0 Adam moments, s_r) is never written: it
// costs no disk and reads back as exactly 0, and the manifest's CRC-32C is
// that of the zeros, so loading, verification, resume and reshard treat it as
// written zeros. A weights file has every block written (its reader demands
// all of its storage).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"
#include "common/config.h"

namespace multiscreen {

// Elements [first, first + n) in global row-major order of tensor `name` (a
// parameter's logical name, or adam_m/<name>, adam_v/<name>) into out.
using TensorSource = std::function<absl::Status(const std::string& name, int64_t first, int64_t n, float* out)>;

// The model at initialization (InitValues: bit for bit what InitParams gives
// any layout), generated on `threads` threads; the Adam moments are 0.
TensorSource InitSource(const ModelDims& dims, uint64_t seed, int threads);

// The tensors of a checkpoint of any layout (ZeRO-1 pieces included), read by
// hyperslab from whichever file holds each range. The caller verifies the
// checkpoint first (VerifyCheckpoint): this reads without checksums. Errors
// name the file and dataset; a range no file holds is DataLoss.
absl::StatusOr<TensorSource> CheckpointSource(const CheckpointRef& ckpt);

// Rows of `inner` elements per block of `block_bytes` (at least one).
int64_t BlockRows(int64_t inner, int64_t block_bytes);

// Writes run_dir/checkpoints/step_N (N = meta.step) for meta.layout and
// meta.dims from `source`: every shard (and ZeRO-1 optimizer piece) file,
// block by block, then the manifest, as SaveCheckpoint does (temporary
// directory, fsync, rename, `latest`); all-zero blocks are left unwritten
// (above). Returns the checkpoint directory. A failure removes the temporary
// directory.
//
// Both writers poll `cancelled` (the commands pass StopRequested, trainer/stop_signal.h,
// as prepare does) before each block and once more before renaming into place: true
// ends the write with CANCELLED, the temporary removed and nothing at the target
// replaced (an interrupted `init` leaves no *.tmp of gigabytes). Null: never.
absl::StatusOr<std::string> WriteCheckpointStreamed(const std::string& run_dir, const CheckpointMeta& meta,
                                                    const TensorSource& source, int64_t block_bytes,
                                                    const std::function<bool()>& cancelled = nullptr);

// Writes the consolidated weights file of `dims` (weights_file.h's format,
// params_crc32c included) from `source` at `path`, atomically.
absl::Status WriteWeightsStreamed(const std::string& path, const ModelDims& dims, const TensorSource& source,
                                  int64_t block_bytes, const std::function<bool()>& cancelled = nullptr);

}  // namespace multiscreen
