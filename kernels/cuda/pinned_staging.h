// Pinned (page-locked, cudaMallocHost) host memory for a kernel table's small per-call
// uploads — token ids, the head's targets, the embedding backward's grouped positions —
// so that each cudaMemcpyAsync from it is a true asynchronous DMA with no hidden wait,
// where a copy from pageable std::vector memory is staged by the driver (docs/performance.md,
// "Copies from pageable host memory"). Staged bytes are handed out bump-pointer style and
// stay unchanged until Release, which the owner calls only right after it waited for its
// stream (every copy out of them has run). The same sequence of Stage calls between two
// Releases lands at the same addresses each time once the memory has grown to fit, which a
// captured CUDA graph's copy nodes need.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace multiscreen::kernels::cuda {

class PinnedStaging {
 public:
  PinnedStaging() = default;
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;
  ~PinnedStaging();

  // `bytes` of pinned memory (256-byte aligned) for the caller to fill, or for a
  // device-to-host copy to land in; valid until Release. Grows as Stage does.
  void* Reserve(const char* op, size_t bytes);

  // Copies `bytes` from host `src` into pinned memory (256-byte aligned) and returns it;
  // valid until Release. Grows by a new cudaMallocHost block when the current one is full
  // (earlier blocks stay: copies may still read them). Failures are fatal (check.h), naming `op`.
  const void* Stage(const char* op, const void* src, size_t bytes);
  template <typename T>
  const T* Stage(const char* op, const T* src, int64_t count) {
    return static_cast<const T*>(Stage(op, static_cast<const void*>(src), static_cast<size_t>(count) * sizeof(T)));
  }

  // Every copy from the staged memory has run (the caller waited for its stream): the next
  // Stage starts at the first byte again. More than one block is merged into one of their
  // total size, so that a steady sequence of Stage calls stops allocating.
  void Release();

  // Bytes of pinned memory held (all blocks).
  size_t capacity() const;

 private:
  struct Block {
    unsigned char* data = nullptr;
    size_t size = 0;
  };
  std::vector<Block> blocks_;
  size_t used_ = 0;  // bytes handed out of blocks_.back()
};

}  // namespace multiscreen::kernels::cuda
