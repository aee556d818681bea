#include "parallel/data_parallel.h"

#include <algorithm>

namespace multiscreen {

DataParallel::DataParallel(Communicator* dp, int64_t size, DataParallelOptions options,
                           kernels::KernelTable<float>* ops)
    : dp_(dp != nullptr ? dp : &single_), size_(size), options_(options), ops_(ops) {
  if (ops_ == nullptr) {
    own_ops_ = std::move(*MakeKernelTable<float>(Device::kCpu));  // the CPU's table cannot fail
    ops_ = own_ops_.get();
  }
  scratch_ = DeviceArray<float>(ops_->device());
  const int64_t n = dp_->size();
  shard_ = (size_ + n - 1) / n;
  options_.bucket_elements = std::max<int64_t>(1, options_.bucket_elements);
}

std::pair<int64_t, int64_t> DataParallel::ShardRange(int dp_rank) const {
  const int64_t begin = std::min(size_, dp_rank * shard_);
  return {begin, std::min(size_, begin + shard_)};
}

void DataParallel::ReduceGradients(float* grads) {
  const int64_t n = dp_->size();
  if (n == 1) return;
  const float inv = 1.0f / static_cast<float>(n);
  if (!options_.zero1) {
    for (int64_t off = 0; off < size_; off += options_.bucket_elements) {
      const int64_t len = std::min(options_.bucket_elements, size_ - off);
      dp_->AllReduce(grads + off, len, ReduceOp::kSum);
      ops_->Scale(grads + off, len, inv);
    }
    return;
  }
  // Bucket k packs the k-th piece of every rank's shard side by side ([dp, len],
  // zero-padded past the end of the buffer) and reduce-scatters it in place.
  const int64_t piece = std::max<int64_t>(1, options_.bucket_elements / n);
  const int me = dp_->rank();
  const auto [own_begin, own_end] = ShardRange(me);
  for (int64_t k = 0; k < shard_; k += piece) {
    const int64_t len = std::min(piece, shard_ - k);
    scratch_.Resize(n * len);
    ops_->Fill(scratch_.data(), n * len, 0.0f);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t begin = std::min(size_, r * shard_ + k), end = std::min(size_, r * shard_ + k + len);
      ops_->Copy(grads + begin, end - begin, scratch_.data() + r * len);
    }
    float* mine = scratch_.data() + me * len;
    dp_->ReduceScatter(scratch_.data(), mine, len, ReduceOp::kSum);
    const int64_t begin = std::min(own_end, own_begin + k), end = std::min(own_end, own_begin + k + len);
    ops_->Copy(mine, end - begin, grads + begin);
    ops_->Scale(grads + begin, end - begin, inv);
  }
}

void DataParallel::AllGatherParams(float* params) {
  const int64_t n = dp_->size();
  if (n == 1) return;
  const int64_t piece = std::max<int64_t>(1, options_.bucket_elements / n);
  const int me = dp_->rank();
  for (int64_t k = 0; k < shard_; k += piece) {
    const int64_t len = std::min(piece, shard_ - k);
    scratch_.Resize(n * len);
    ops_->Fill(scratch_.data(), n * len, 0.0f);
    const int64_t begin = std::min(size_, me * shard_ + k), end = std::min(size_, me * shard_ + k + len);
    ops_->Copy(params + begin, end - begin, scratch_.data() + me * len);
    dp_->AllGather(scratch_.data() + me * len, scratch_.data(), len);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t b = std::min(size_, r * shard_ + k), e = std::min(size_, r * shard_ + k + len);
      ops_->Copy(scratch_.data() + r * len, e - b, params + b);
    }
  }
}

}  // namespace multiscreen
