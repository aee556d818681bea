// Sharded HDF5 checkpoints (DESIGN "Checkpoints", issue 6).
//
//   <run_dir>/checkpoints/step_NNNNNNNN/
//     shard_pp{p}_tp{t}.h5   one per model-parallel rank: every parameter slice
//                            the rank owns under its logical name, and Adam's
//                            moments under adam_m/<name>, adam_v/<name>; each
//                            dataset has attributes global_shape and offset
//     optim_pp{p}_tp{t}_dp{d}.h5  under ZeRO-1 the moments live here instead,
//                            one file per dp rank: the pieces of each tensor
//                            its flat range covers, as 1-D datasets with
//                            attributes global_shape and flat_offset (the
//                            global row-major index of their first element)
//     manifest.json          model, layout, step, samples, tokens, optimizer
//                            step, loss-scaler state, seeds, the build that
//                            wrote it, and a CRC-32C per dataset per file
//   <run_dir>/checkpoints/latest   the name of the newest complete checkpoint
//
// A checkpoint is written into checkpoints/.tmp-step_NNNNNNNN/, every file
// fsynced, the manifest written last, then the directory renamed into place and
// `latest` replaced atomically. Old checkpoints are pruned only after that.
// Loading verifies the manifest and the checksums of what it reads, and falls
// back (with a warning) to the newest complete checkpoint that verifies.
// Checkpoints set aside (checkpoints/unverified/, by SetAsideCheckpoints) are
// never read, pruned or overwritten. A failed save removes its temporary
// directory, so the checkpoints already there are all that remains.
// Any layout reads any other: each rank reads the row ranges it needs from
// whichever shard files hold them (HDF5 hyperslabs).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/weights_file.h"
#include "common/build_info.h"
#include "common/config.h"
#include "common/file_lock.h"
#include "model/param_layout.h"
#include "nlohmann/json.hpp"

namespace multiscreen {

struct ParallelLayout {
  int64_t tp = 1, pp = 1, dp = 1, zero = 0;
};

// Run-level state stored in the manifest.
struct CheckpointMeta {
  int64_t step = 0;
  int64_t samples = 0;
  int64_t tokens = 0;
  int64_t adam_step = 0;
  int64_t seed = 0;
  int64_t nonfinite_in_a_row = 0;
  double loss_scale = 1.0;
  int64_t loss_scale_good_steps = 0;
  int64_t loss_scale_skipped = 0;
  ParallelLayout layout;
  ModelDims dims;
  // What the run trained on, per training source: {"<name>": {"tokens": N, "fingerprint":
  // "xxxxxxxx"}} (TokenStream::Fingerprint; the name is "train" for --data, the source's
  // name in a mixture, whose entries also carry "weight"). Null in checkpoints written without it (older ones, `ckpt`-made).
  nlohmann::json data;
  // The build that wrote the checkpoint (manifest "build": {"version", "commit"}), as read;
  // empty strings in manifests written before it was recorded. A save records ThisBuild(),
  // whatever this field holds.
  BuildInfo build;
};

// One model-parallel rank's tensors, in its layout's flat order.
struct ShardTensors {
  const ParamLayout* layout = nullptr;
  const float* params = nullptr;
  const float* adam_m = nullptr;  // may be null (weights only)
  const float* adam_v = nullptr;
  int64_t pp_rank = 0, tp_rank = 0;
};

// Adam's moments for flat elements [begin, end) of a model-parallel rank's
// layout (a ZeRO-1 dp rank's share): m and v hold end − begin values.
struct OptimizerPiece {
  const ParamLayout* layout = nullptr;
  int64_t begin = 0, end = 0;
  const float* adam_m = nullptr;
  const float* adam_v = nullptr;
  int64_t pp_rank = 0, tp_rank = 0, dp_rank = 0;
};

// What one dataset of a checkpoint file holds: its shape, and where it sits
// in its tensor (attributes global_shape and offset, or flat_offset for a
// ZeRO-1 piece).
struct ExpectedDataset {
  std::vector<int64_t> shape, global_shape, offset;
  int64_t flat_offset = -1;  // ≥ 0 for a piece
};
// A file's datasets in the order the writers write them: parameters before their moments.
using ExpectedFile = std::vector<std::pair<std::string, ExpectedDataset>>;

// Every file a checkpoint of `dims` under `layout` holds, with its datasets
// (what WriteShard and WriteOptimizerPiece write): the loaders check files
// against it, the streamed writers (issue 20) write it.
std::map<std::string, ExpectedFile> ExpectedContents(const ModelDims& dims, const ParallelLayout& layout);

// The file name of a model-parallel rank's shard, and of a dp rank's optimizer piece.
std::string ShardFileName(int64_t pp_rank, int64_t tp_rank);
std::string OptimizerFileName(int64_t pp_rank, int64_t tp_rank, int64_t dp_rank);
// "step_00001000".
std::string StepDirName(int64_t step);

// Writes a complete checkpoint of a single-process (or already gathered) run:
// BeginCheckpoint, WriteShard for each shard, CommitCheckpoint. Returns the
// checkpoint directory. Keeps the last keep_last checkpoints plus every
// keep_every-th step (0 = none) after the new one is in place.
absl::StatusOr<std::string> SaveCheckpoint(const std::string& run_dir, const CheckpointMeta& meta,
                                           const std::vector<ShardTensors>& shards, int64_t keep_last,
                                           int64_t keep_every);

// The pieces, for ranks that write their own shard into a shared directory:
// one rank calls BeginCheckpoint, every writer WriteShard (or
// WriteOptimizerPiece) + WriteFileRecord into TempCheckpointDir, then (after a
// barrier) one rank ReadFileRecords(CheckpointFiles(layout)) and CommitCheckpoint.
std::string TempCheckpointDir(const std::string& run_dir, int64_t step);
absl::StatusOr<std::string> BeginCheckpoint(const std::string& run_dir, int64_t step);
// Writes one shard file into tmp_dir; returns its manifest record
// {"bytes": N, "datasets": {name: crc32c}}.
absl::StatusOr<nlohmann::json> WriteShard(const std::string& tmp_dir, const ShardTensors& shard);
// Writes a ZeRO-1 optimizer piece into tmp_dir; returns its manifest record.
absl::StatusOr<nlohmann::json> WriteOptimizerPiece(const std::string& tmp_dir, const OptimizerPiece& piece);
// Leaves a file's manifest record beside it (<file>.json) for the committer.
absl::Status WriteFileRecord(const std::string& tmp_dir, const std::string& file, const nlohmann::json& record);
// The records of `files`, as CommitCheckpoint's `files`; removes the record
// files. Errors name a file whose record is missing (its writer failed).
absl::StatusOr<nlohmann::json> ReadFileRecords(const std::string& tmp_dir, const std::vector<std::string>& files);
// The files a layout writes: its shards, and its optimizer pieces under ZeRO-1.
std::vector<std::string> CheckpointFiles(const ParallelLayout& layout);
absl::StatusOr<std::string> CommitCheckpoint(const std::string& run_dir, const std::string& tmp_dir,
                                             const CheckpointMeta& meta, const nlohmann::json& files,
                                             int64_t keep_last, int64_t keep_every);
// Ends a save that failed: removes tmp_dir and returns `error`, adding, when it
// says the disk is full (RESOURCE_EXHAUSTED), the bytes the checkpoint needs
// and the bytes free once its partial files are gone.
absl::Status AbandonCheckpoint(const std::string& tmp_dir, const absl::Status& error, int64_t bytes_needed);

// A verified checkpoint on disk.
struct CheckpointRef {
  std::string dir;
  CheckpointMeta meta;
  nlohmann::json manifest;
  // A reader's shared lock on ReaderLockPath(dir) (lock_for_reading below), held while
  // any copy of this ref lives: the run's pruning leaves the checkpoint in place until
  // it is released. Null for the run's own refs and where no lock applies.
  std::shared_ptr<const FileLock> reading;
  // The shard files (shard_pp*_tp*.h5: the weights and, without ZeRO-1, the moments),
  // opened by OpenCheckpoint and held open while any copy of this ref lives: a pruner that
  // does not take the reader's lock (a file system without flock, a person) can remove
  // the directory, but what was opened still reads (issue 43: `ckpt export` on a live
  // run with keep_last: 1 lost the race). CheckpointFile reads through them.
  std::shared_ptr<const std::map<std::string, std::shared_ptr<H5Reader>>> open_files;
};

// File `name` of the manifest's "files": the one `ckpt` holds open, else opened now by
// its path. Errors: H5Reader::Open's (naming the path).
absl::StatusOr<std::shared_ptr<H5Reader>> CheckpointFile(const CheckpointRef& ckpt, const std::string& name);

// The lock file a reader of checkpoint `dir` holds shared and the run's pruning takes
// exclusively before it removes `dir` (Prune: a checkpoint being read is kept until a
// later save): checkpoints/.reading-step_N beside checkpoints/step_N. Empty when `dir`
// is not a step_N directory of a checkpoints/ directory (nothing prunes it).
std::string ReaderLockPath(const std::string& dir);

// The manifest's schema: every field present with its JSON type (an integer is
// not a float or a string), format "multiscreen-checkpoint", format_version 1,
// model sizes that pass CheckModelDims, a layout whose tp divides N_H and pp
// N_L (dp ≤ 2^20, zero 0 or 1), step, samples ≤ 2^50 and tokens ≤ 2^62 (so
// that counting on from them cannot overflow), adam_step, loss_scaler counts
// and nonfinite_in_a_row ≤ step, a finite positive loss scale,
// lr_schedule.step = step and rng.data_samples_consumed = samples. Errors are
// one line naming `path` and the field. Does not look at "files".
absl::StatusOr<CheckpointMeta> ValidateManifest(const nlohmann::json& manifest, const std::string& path);

// Reads and checks `dir`'s manifest against everything it must agree with
// before any data is read or allocated: ValidateManifest; a directory named
// step_N holds step N; "files" lists exactly the files the layout writes, each
// {"bytes": int, "datasets": {name: crc32c}} with exactly the datasets the
// layout puts there; every file present with its recorded size, the files
// together at least the model's parameter bytes; every dataset's header (HDF5
// float, shape, global_shape, offset or flat_offset, all of it stored) as the
// manifest's model and layout say. Errors name the file and dataset or field.
absl::StatusOr<CheckpointRef> OpenCheckpoint(const std::string& dir);

// The newest checkpoint of run_dir that verifies (every step_* directory,
// newest first; `latest` is not consulted); each newer one skipped is reported
// with a warning. NotFound when the run has no step_* directory; DataLoss when
// it has some and none verifies, in one line that names each with its first
// problem ("<dir>: 2 checkpoints found, none verifies: step_00000010:
// shard_pp1_tp0.h5: missing; step_00000005: ..."). `lock_for_reading`: a reader
// other than the run takes each candidate's reader lock (ReaderLockPath) before it
// reads a byte of it; the returned ref's `reading` holds it.
absl::StatusOr<CheckpointRef> FindLatestCheckpoint(const std::string& run_dir, bool lock_for_reading = false);

// Moves every step_* directory of run_dir/checkpoints with a step after
// `after_step` (−1: all of them) into checkpoints/unverified/, keeping its name
// (".1", ".2", … appended when the name is taken there), and points `latest`
// at the newest checkpoint left (removing it when none is). Returns the new
// paths. For checkpoints that failed to verify: kept for a person to inspect
// or repair, out of the way of the run's own saves and of retention.
absl::StatusOr<std::vector<std::string>> SetAsideCheckpoints(const std::string& run_dir, int64_t after_step);

// `path` is a checkpoint directory (holding manifest.json) or a run directory
// (its newest loadable checkpoint). Errors name the path.
absl::StatusOr<CheckpointRef> OpenCheckpointOrRun(const std::string& path, bool lock_for_reading = false);

// The full model's weights of a checkpoint of any layout.
absl::StatusOr<Weights> ConsolidatedWeights(const CheckpointRef& ckpt);

// Fills a target layout's buffers from a checkpoint saved under any layout
// (with or without ZeRO-1): every tensor is located by global row-major
// element index, each dataset streamed in bounded chunks and checked against
// its CRC-32C, refused when it holds NaN or ±inf, and the overlap copied. params covers the whole layout; adam_m
// and adam_v (may be null) cover flat elements moment_range = [begin, end) of
// it (end < 0: to the end), so a ZeRO-1 rank reads only its share.
// Errors name the file and dataset; a checkpoint of another model (ModelDifferences:
// family, sizes, w_th, a switch) names each field that differs with both values.
absl::Status LoadShard(const CheckpointRef& ckpt, const ParamLayout& target, float* params, float* adam_m,
                       float* adam_v, std::pair<int64_t, int64_t> moment_range = {0, -1});

// Verifies every dataset of every file against its CRC-32C in the manifest,
// and that it holds no NaN or ±inf; returns one line per problem (empty when
// all is well). weights_only: the parameters' datasets only (what an export
// reads), not Adam's moments.
std::vector<std::string> VerifyCheckpoint(const CheckpointRef& ckpt, bool weights_only = false);

// Bytes of each shard file of `dims` under `layout` (weights, and Adam's two
// moments unless weights_only), computed from the layouts without allocating.
struct ShardPlan {
  std::string file;
  int64_t pp_rank = 0, tp_rank = 0;
  int64_t weight_bytes = 0;
  int64_t moment_bytes = 0;
};
std::vector<ShardPlan> PlanCheckpoint(const ModelDims& dims, const ParallelLayout& layout);

}  // namespace multiscreen
