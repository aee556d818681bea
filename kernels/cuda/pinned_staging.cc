// PinnedStaging (pinned_staging.h).
#include "kernels/cuda/pinned_staging.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "kernels/cuda/check.h"

namespace multiscreen::kernels::cuda {
namespace {

constexpr size_t kAlign = 256;
constexpr size_t kMinBlock = size_t{64} << 10;

size_t Aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

}  // namespace

PinnedStaging::~PinnedStaging() {
  for (const Block& b : blocks_) cudaFreeHost(b.data);
}

const void* PinnedStaging::Stage(const char* op, const void* src, size_t bytes) {
  void* dst = Reserve(op, bytes);
  if (bytes > 0) std::memcpy(dst, src, bytes);
  return dst;
}

void* PinnedStaging::Reserve(const char* op, size_t bytes) {
  const size_t need = Aligned(std::max<size_t>(bytes, 1));
  if (blocks_.empty() || used_ + need > blocks_.back().size) {
    Block b;
    b.size = std::max(kMinBlock, 2 * need);
    MS_CUDA_CHECK(op, cudaMallocHost(reinterpret_cast<void**>(&b.data), b.size));
    blocks_.push_back(b);
    used_ = 0;
  }
  unsigned char* dst = blocks_.back().data + used_;
  used_ += need;
  return dst;
}

void PinnedStaging::Release() {
  used_ = 0;
  if (blocks_.size() <= 1) return;
  const size_t total = capacity();
  for (const Block& b : blocks_) cudaFreeHost(b.data);
  blocks_.clear();
  Block b;
  b.size = total;
  MS_CUDA_CHECK("PinnedStaging::Release", cudaMallocHost(reinterpret_cast<void**>(&b.data), b.size));
  blocks_.push_back(b);
}

size_t PinnedStaging::capacity() const {
  size_t total = 0;
  for (const Block& b : blocks_) total += b.size;
  return total;
}

}  // namespace multiscreen::kernels::cuda
