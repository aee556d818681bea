#include "parallel/data_parallel.h"

#include <algorithm>
#include <chrono>

namespace multiscreen {

DataParallel::DataParallel(Communicator* dp, int64_t size, DataParallelOptions options,
                           kernels::KernelTable<float>* ops, Communicator* background)
    : dp_(dp != nullptr ? dp : &single_), background_(background), size_(size), options_(options), ops_(ops) {
  if (ops_ == nullptr) {
    own_ops_ = std::move(*MakeKernelTable<float>(Device::kCpu));  // the CPU's table cannot fail
    ops_ = own_ops_.get();
  }
  scratch_ = DeviceArray<float>(ops_->device());
  const int64_t n = dp_->size();
  shard_ = (size_ + n - 1) / n;
  options_.bucket_elements = std::max<int64_t>(1, options_.bucket_elements);
  piece_ = std::max<int64_t>(1, options_.bucket_elements / n);
  if (options_.overlap && n > 1 && background_ != nullptr) worker_ = std::thread([this] { WorkerLoop(); });
}

DataParallel::~DataParallel() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_.notify_one();
  worker_.join();
}

std::pair<int64_t, int64_t> DataParallel::ShardRange(int dp_rank) const {
  const int64_t begin = std::min(size_, dp_rank * shard_);
  return {begin, std::min(size_, begin + shard_)};
}

int64_t DataParallel::Buckets() const {
  if (!options_.zero1) return (size_ + options_.bucket_elements - 1) / options_.bucket_elements;
  return (shard_ + piece_ - 1) / piece_;
}

int64_t DataParallel::BucketLow(int64_t b) const {
  // Plain: [b·E, …). ZeRO-1: the pieces [r·S + b·piece, …) of every rank r, the lowest
  // of them rank 0's.
  return options_.zero1 ? b * piece_ : b * options_.bucket_elements;
}

void DataParallel::ReduceBucket(Communicator& comm, float* grads, int64_t b) {
  const int64_t n = comm.size();
  if (!options_.zero1) {
    const int64_t off = b * options_.bucket_elements, len = std::min(options_.bucket_elements, size_ - off);
    comm.AllReduce(grads + off, len, ReduceOp::kSum);
    return;
  }
  // Bucket b packs the b-th piece of every rank's shard side by side ([dp, len],
  // zero-padded past the end of the buffer) and reduce-scatters it in place.
  const int64_t k = b * piece_, len = std::min(piece_, shard_ - k);
  const int me = comm.rank();
  const auto [own_begin, own_end] = ShardRange(me);
  scratch_.Resize(n * len);
  ops_->Fill(scratch_.data(), n * len, 0.0f);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t begin = std::min(size_, r * shard_ + k), end = std::min(size_, r * shard_ + k + len);
    ops_->Copy(grads + begin, end - begin, scratch_.data() + r * len);
  }
  float* mine = scratch_.data() + me * len;
  comm.ReduceScatter(scratch_.data(), mine, len, ReduceOp::kSum);
  const int64_t begin = std::min(own_end, own_begin + k), end = std::min(own_end, own_begin + k + len);
  ops_->Copy(mine, end - begin, grads + begin);
}

void DataParallel::ReduceGradients(float* grads) {
  if (dp_->size() == 1) return;
  for (int64_t b = 0, nb = Buckets(); b < nb; ++b) ReduceBucket(*dp_, grads, b);
}

void DataParallel::BeginReduce(float* grads) {
  grads_ = grads;
  if (!overlapped()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  launched_from_ = Buckets();
  done_ = 0;
  queue_.clear();
}

void DataParallel::GradientsFinalFrom(int64_t begin) {
  if (!overlapped()) return;
  bool launched = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    while (launched_from_ > 0 && BucketLow(launched_from_ - 1) >= begin) {
      queue_.push_back(--launched_from_);
      launched = true;
    }
  }
  if (launched) work_.notify_one();
}

double DataParallel::FinishReduce() {
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  if (!overlapped()) {
    ReduceGradients(grads_);
    return seconds();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    started_early_ = Buckets() - launched_from_;
  }
  GradientsFinalFrom(0);
  std::unique_lock<std::mutex> lock(mutex_);
  finished_.wait(lock, [&] { return done_ == Buckets(); });
  return seconds();
}

void DataParallel::WorkerLoop() {
  for (;;) {
    int64_t b = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      b = queue_.front();
      queue_.pop_front();
    }
    // Only this thread touches the bucket's elements (and the scratch) until done_ says so.
    ReduceBucket(*background_, grads_, b);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++done_;
    }
    finished_.notify_one();
  }
}

void DataParallel::AllGatherParams(float* params) {
  const int64_t n = dp_->size();
  if (n == 1) return;
  const int me = dp_->rank();
  for (int64_t k = 0; k < shard_; k += piece_) {
    const int64_t len = std::min(piece_, shard_ - k);
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
