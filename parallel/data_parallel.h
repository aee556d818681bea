// Data parallelism over the dp group (DESIGN "Data flow of one training step",
// last line): after the last micro-batch, every replica's gradient buffer is
// summed over dp, either whole on every rank (all-reduce, in buckets) or,
// under ZeRO-1, reduce-scattered so that each dp rank holds the sum of a
// contiguous shard of the flat buffer, updates that shard with its optimizer
// state, and all-gathers the updated parameters.
//
// A sum, not a mean: the step (parallel/step.cc ComputeGradients) already weighs each
// micro-batch by 1/(M·dp), so that every rank's backward carries the gradients at the
// magnitude one process's would (the same fp16 overflows whatever the layout).
//
// The flat buffer is cut into dp shards of S = ⌈size/dp⌉ elements: rank r owns
// [r·S, min((r+1)·S, size)). Collectives move buckets of about
// `bucket_elements` so that no scratch buffer grows with the model.
//
// The buffers live on the step's device (the dp communicator's device()); the scaling
// and the ZeRO-1 packing go through that device's kernel table.
//
// Overlap (--dp_overlap, issue 15): the step tells the reducer, during the last
// micro-batch's backward, which suffix of the buffer is final (the backward
// finishes the last layer first, and the layers sit at the end of the layout);
// each bucket lying wholly inside it is reduced at once on a communication thread
// over a communicator of its own, while the main thread computes on. The buckets
// and the collective each one makes are the same as without overlap, only their
// order differs (last bucket first), so the reduced gradients are the same bits.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/communicator.h"
#include "kernels/device_array.h"
#include "kernels/kernel_table.h"

namespace multiscreen {

struct DataParallelOptions {
  bool zero1 = false;                        // --zero=1: shard the optimizer over dp
  int64_t bucket_elements = int64_t{1} << 22;  // fp32 elements per collective (16 MiB)
  bool overlap = false;                      // --dp_overlap=on: reduce buckets on a thread during the backward
};

class DataParallel {
 public:
  // `dp`: the data-parallel group (null: a group of one); `size`: elements of
  // this rank's flat gradient/parameter buffer (the same on every dp rank); `ops`: the
  // kernel table of the buffers' device (outlives this; null: the CPU's, owned here).
  // `background`: with options.overlap and dp > 1, a second communicator over the
  // same group (same ranks, same order, same device) that only the communication thread
  // uses (ProcessGrid::DuplicateDp); otherwise unused and may be null. With overlap,
  // dp > 1 and no background communicator, the reducer works without overlap.
  DataParallel(Communicator* dp, int64_t size, DataParallelOptions options = {},
               kernels::KernelTable<float>* ops = nullptr, Communicator* background = nullptr);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  const DataParallelOptions& options() const { return options_; }
  int64_t size() const { return size_; }
  // Whether buckets are reduced on the communication thread (options.overlap, dp > 1).
  bool overlapped() const { return worker_.joinable(); }

  // grads [size] (device) ← the sum over the dp group. Plain: all of it, on every rank.
  // ZeRO-1: only ShardRange(own rank) holds the sum afterwards; the rest of
  // grads keeps this rank's unreduced values. Blocking, on the calling thread.
  void ReduceGradients(float* grads);

  // The overlapped form of ReduceGradients, same result bit for bit. Every dp rank
  // makes the same calls with the same arguments:
  //   BeginReduce(grads) before the backward writes its last values into grads;
  //   GradientsFinalFrom(begin) whenever grads[begin, size) will not be written
  //     again this step (begin never increasing between calls): buckets wholly in
  //     that suffix start on the communication thread, the last bucket first;
  //   FinishReduce() marks everything final and waits for every bucket.
  // FinishReduce returns the seconds it waited (the exposed dp communication).
  // Without overlap, Begin and FinalFrom do nothing and FinishReduce runs
  // ReduceGradients and returns its duration. grads must stay valid until then.
  void BeginReduce(float* grads);
  void GradientsFinalFrom(int64_t begin);
  double FinishReduce();
  // Buckets of the last overlapped reduction that started before FinishReduce (0
  // without overlap): how much the backward hid, for tests and logs.
  int64_t buckets_started_early() const { return started_early_; }

  // [begin, end) of the flat buffer dp rank `dp_rank` owns under ZeRO-1
  // (possibly empty for the last ranks of a tiny buffer).
  std::pair<int64_t, int64_t> ShardRange(int dp_rank) const;
  std::pair<int64_t, int64_t> OwnedRange() const { return ShardRange(dp_->rank()); }

  // ZeRO-1, after each rank updated params[OwnedRange()]: params [size] (device) ← every
  // rank's owned shard, on every rank. A no-op when dp = 1.
  void AllGatherParams(float* params);

 private:
  int64_t Buckets() const;
  // The lowest buffer offset bucket b reads (it is final once this is).
  int64_t BucketLow(int64_t b) const;
  // Bucket b's collective over `comm`: the unit both paths share.
  void ReduceBucket(Communicator& comm, float* grads, int64_t b);
  void WorkerLoop();

  SingleProcessCommunicator single_;
  Communicator* dp_;
  Communicator* background_;
  int64_t size_;
  int64_t shard_;  // S
  int64_t piece_;  // ZeRO-1: elements of each rank's shard per bucket
  DataParallelOptions options_;
  std::unique_ptr<kernels::KernelTable<float>> own_ops_;  // when none was given
  kernels::KernelTable<float>* ops_;
  DeviceArray<float> scratch_;  // one bucket [dp, len] on the buffers' device

  // The overlapped reduction: buckets [launched_from_, Buckets()) were handed to the
  // worker; done_ of them are reduced.
  float* grads_ = nullptr;
  int64_t launched_from_ = 0;
  std::mutex mutex_;
  std::condition_variable work_, finished_;
  std::deque<int64_t> queue_;
  int64_t done_ = 0;
  int64_t started_early_ = 0;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace multiscreen
