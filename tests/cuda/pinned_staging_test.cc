// kernels/cuda/pinned_staging.h: staged bytes keep their values until Release (earlier
// blocks survive growth), reach the device by cudaMemcpyAsync, and a repeated sequence of
// Stage calls between Releases lands at the same addresses once grown (a graph's copies).
#include "kernels/cuda/pinned_staging.h"

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "tests/cuda/cuda_test.h"

namespace multiscreen::kernels::cuda {
namespace {

class PinnedStagingTest : public multiscreen::CudaTest {};

// Stages arrays of 3, 20,000 and 40,000 int64 (past the first 64 KiB block) and returns
// their staged addresses.
std::vector<const int64_t*> StageSequence(PinnedStaging* staging, const std::vector<std::vector<int64_t>>& arrays) {
  std::vector<const int64_t*> at;
  for (const auto& a : arrays) at.push_back(staging->Stage("test", a.data(), static_cast<int64_t>(a.size())));
  return at;
}

TEST_F(PinnedStagingTest, StagedBytesSurviveGrowthReachTheDeviceAndRepeatAtTheSameAddresses) {
  std::vector<std::vector<int64_t>> arrays;
  for (int64_t n : {3, 20000, 40000}) {
    arrays.emplace_back(n);
    std::iota(arrays.back().begin(), arrays.back().end(), 7 * n);
  }
  PinnedStaging staging;
  const std::vector<const int64_t*> first = StageSequence(&staging, arrays);
  for (size_t i = 0; i < arrays.size(); ++i) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first[i]) % 256, 0u);
    EXPECT_EQ(std::vector<int64_t>(first[i], first[i] + arrays[i].size()), arrays[i]) << i;  // after growth too
  }
  // Uploaded from the staging by an asynchronous copy.
  const int64_t n = static_cast<int64_t>(arrays[2].size());
  int64_t* device = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), n * sizeof(int64_t)), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(device, first[2], n * sizeof(int64_t), cudaMemcpyHostToDevice, cudaStreamLegacy),
            cudaSuccess);
  std::vector<int64_t> back(n);
  ASSERT_EQ(cudaMemcpy(back.data(), device, n * sizeof(int64_t), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, arrays[2]);
  ASSERT_EQ(cudaFree(device), cudaSuccess);
  // Released: the blocks merge into one; the same sequence then repeats at fixed addresses.
  staging.Release();
  const size_t capacity = staging.capacity();
  const std::vector<const int64_t*> second = StageSequence(&staging, arrays);
  staging.Release();
  const std::vector<const int64_t*> third = StageSequence(&staging, arrays);
  EXPECT_EQ(third, second);
  EXPECT_EQ(staging.capacity(), capacity);
  for (size_t i = 0; i < arrays.size(); ++i) {
    EXPECT_EQ(std::vector<int64_t>(third[i], third[i] + arrays[i].size()), arrays[i]) << i;
  }
}

}  // namespace
}  // namespace multiscreen::kernels::cuda
