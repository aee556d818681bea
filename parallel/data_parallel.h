// Data parallelism over the dp group (DESIGN "Data flow of one training step",
// last line): after the last micro-batch, every replica's gradient buffer is
// averaged over dp, either whole on every rank (all-reduce, in buckets) or,
// under ZeRO-1, reduce-scattered so that each dp rank holds the mean of a
// contiguous shard of the flat buffer, updates that shard with its optimizer
// state, and all-gathers the updated parameters.
//
// The flat buffer is cut into dp shards of S = ⌈size/dp⌉ elements: rank r owns
// [r·S, min((r+1)·S, size)). Collectives move buckets of about
// `bucket_elements` so that no scratch buffer grows with the model.
//
// The buffers live on the step's device (the dp communicator's device()); the scaling
// and the ZeRO-1 packing go through that device's kernel table.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/communicator.h"
#include "kernels/device_array.h"
#include "kernels/kernel_table.h"

namespace multiscreen {

struct DataParallelOptions {
  bool zero1 = false;                        // --zero=1: shard the optimizer over dp
  int64_t bucket_elements = int64_t{1} << 22;  // fp32 elements per collective (16 MiB)
};

class DataParallel {
 public:
  // `dp`: the data-parallel group (null: a group of one); `size`: elements of
  // this rank's flat gradient/parameter buffer (the same on every dp rank); `ops`: the
  // kernel table of the buffers' device (outlives this; null: the CPU's, owned here).
  DataParallel(Communicator* dp, int64_t size, DataParallelOptions options = {},
               kernels::KernelTable<float>* ops = nullptr);

  const DataParallelOptions& options() const { return options_; }
  int64_t size() const { return size_; }

  // grads [size] (device) ← the mean over the dp group. Plain: all of it, on every rank.
  // ZeRO-1: only ShardRange(own rank) holds the mean afterwards; the rest of
  // grads keeps this rank's unreduced values.
  void ReduceGradients(float* grads);

  // [begin, end) of the flat buffer dp rank `dp_rank` owns under ZeRO-1
  // (possibly empty for the last ranks of a tiny buffer).
  std::pair<int64_t, int64_t> ShardRange(int dp_rank) const;
  std::pair<int64_t, int64_t> OwnedRange() const { return ShardRange(dp_->rank()); }

  // ZeRO-1, after each rank updated params[OwnedRange()]: params [size] (device) ← every
  // rank's owned shard, on every rank. A no-op when dp = 1.
  void AllGatherParams(float* params);

 private:
  SingleProcessCommunicator single_;
  Communicator* dp_;
  int64_t size_;
  int64_t shard_;  // S
  DataParallelOptions options_;
  std::unique_ptr<kernels::KernelTable<float>> own_ops_;  // when none was given
  kernels::KernelTable<float>* ops_;
  DeviceArray<float> scratch_;  // one bucket [dp, len] on the buffers' device
};

}  // namespace multiscreen
