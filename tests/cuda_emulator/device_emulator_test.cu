// The emulated device (cuda_emulator/) on small kernels: each checker fires on a
// planted bug and names the kernel, block, thread and address; the correct twin of each
// kernel runs clean; warp collectives, launch limits, streams and devices behave as the
// CUDA documentation says.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cuda_emulator/emulator.h"
#include "tests/cuda_emulator/emulator_test.h"
#include "kernels/cuda/launch.h"

namespace {

using multiscreen::kernels::cuda::Launch;

// ---- Kernels, each a bug and its fix ------------------------------------------------

// Each thread stores its value in shared memory and reads its neighbour's; without the
// barrier the read races with the neighbour's store.
template <bool kSync>
__global__ void NeighbourKernel(const float* x, float* y) {
  __shared__ float values[64];
  values[threadIdx.x] = x[threadIdx.x];
  if (kSync) __syncthreads();
  y[threadIdx.x] = values[(threadIdx.x + 1) % blockDim.x];
}

// Reads x[0, n + extra): extra = 1 reads one past the end.
__global__ void CopyKernel(const float* x, float* y, int n, int extra) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n + extra) y[i % n] = x[i];
}

// Sums shared memory that only the even threads wrote (the odd entries never were).
__global__ void HalfWrittenKernel(float* out) {
  __shared__ float values[32];
  if (threadIdx.x % 2 == 0) values[threadIdx.x] = 1.f;
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0;
    for (int i = 0; i < 32; ++i) sum += values[i];
    *out = sum;
  }
}

// The upper half of the block leaves before the barrier.
__global__ void EarlyExitKernel(float* y) {
  __shared__ float values[64];
  if (threadIdx.x >= 32) return;
  values[threadIdx.x] = 1.f;
  __syncthreads();
  y[threadIdx.x] = values[31 - threadIdx.x];
}

// Lane `skip` does not join the butterfly its full mask names.
__global__ void MissingLaneKernel(float* y, int skip) {
  float v = float(threadIdx.x);
  if (int(threadIdx.x) != skip) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  y[threadIdx.x] = v;
}

// The warp collectives' results, per lane: [xor sum, up by 1 (width 8), down by 2
// (width 16), broadcast of lane 3 (width 8), ballot of odd lanes].
__global__ void WarpKernel(int* out) {
  const int lane = threadIdx.x;
  int sum = lane;
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  out[lane * 5 + 0] = sum;
  out[lane * 5 + 1] = __shfl_up_sync(0xffffffffu, lane, 1, 8);
  out[lane * 5 + 2] = __shfl_down_sync(0xffffffffu, lane, 2, 16);
  out[lane * 5 + 3] = __shfl_sync(0xffffffffu, lane, 3, 8);
  out[lane * 5 + 4] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 2));
}

// A block-wide tree sum in shared memory, warp-synchronous in its last steps: correct
// only because __syncwarp orders the lanes' accesses.
__global__ void TreeSumKernel(const float* x, float* out) {
  __shared__ float s[64];
  s[threadIdx.x] = x[threadIdx.x];
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = s[threadIdx.x] + s[threadIdx.x + 32];
    __syncwarp();
    s[threadIdx.x] = v;
    __syncwarp();
    for (int half = 16; half > 0; half /= 2) {
      if (threadIdx.x < half) v = s[threadIdx.x] + s[threadIdx.x + half];
      __syncwarp();
      if (threadIdx.x < half) s[threadIdx.x] = v;
      __syncwarp();
    }
  }
  if (threadIdx.x == 0) *out = s[0];
}

__global__ void DynamicSharedKernel(float* y) {
  float* buffer = static_cast<float*>(msemu::DynamicShared());
  buffer[threadIdx.x] = float(threadIdx.x);
  __syncthreads();
  y[threadIdx.x] = buffer[blockDim.x - 1 - threadIdx.x];
}

// Two halves of the block meet one barrier at two call sites (undefined on a GPU).
__global__ void TwoSitesKernel(float* y) {
  if (threadIdx.x < 32) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  y[threadIdx.x] = 1.f;
}

// Correct warp-synchronous code: lane 0 writes, every lane reads after __syncwarp, and
// lane 0 writes again after another __syncwarp.
__global__ void SyncwarpReadersKernel(int* y) {
  __shared__ int s[1];
  if (threadIdx.x == 0) s[0] = 1;
  __syncwarp();
  const int v = s[0];
  __syncwarp();
  if (threadIdx.x == 0) s[0] = 2;
  y[threadIdx.x] = v;
}

// The usual reduction over the first 16 lanes with a partial mask: lanes 8..15 read
// lanes outside the mask (undefined values they never use); lane 0's sum is right.
__global__ void PartialMaskSumKernel(float* y) {
  float v = float(threadIdx.x);
  if (threadIdx.x < 16) {
    for (int offset = 8; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffu, v, offset);
  }
  if (threadIdx.x == 0) *y = v;
}

// Thread 0 initializes a counter while the others already add to it: no barrier between.
__global__ void StoreThenAtomicsKernel(int* out) {
  __shared__ int counter;
  if (threadIdx.x == 0) counter = 0;
  atomicAdd(&counter, 1);
  __syncthreads();
  if (threadIdx.x == 0) *out = counter;
}

// Local memory beyond the emulator's 256 KiB per thread.
__global__ void BigLocalKernel(float* y, int i) {
  volatile float big[96 * 1024];  // 384 KiB
  big[i] = 1.f;
  y[0] = big[i];
}

__global__ void AtomicKernel(int* counter, float* total) {
  atomicAdd(counter, 1);
  atomicAdd(total, 0.5f);
}

// ---- Helpers ----------------------------------------------------------------------

using msemu_test::AllReports;
using msemu_test::EmulatorTest;
using msemu_test::Reported;

std::vector<float> Iota(int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = float(i);
  return v;
}

// ---- Checkers: each fires on its bug, and not on the fix ------------------------------

TEST_F(EmulatorTest, SharedMemoryRaceIsReportedAndTheBarrierFixesIt) {
  float* x = DeviceCopy(Iota(64));
  float* y = DeviceCopy(std::vector<float>(64, 0.f));
  {
    msemu::ScopedCapture capture;
    Launch<NeighbourKernel<false>>(1, 64, 0, nullptr, x, y);
    EXPECT_TRUE(Reported(capture, {"race on shared memory", "NeighbourKernel<false>", "block (0,0,0)", "thread ("}))
        << AllReports(capture);
  }
  {
    msemu::ScopedCapture capture;
    Launch<NeighbourKernel<true>>(1, 64, 0, nullptr, x, y);
    EXPECT_TRUE(capture.reports().empty()) << AllReports(capture);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
  const std::vector<float> got = HostCopy(y, 64);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(got[i], float((i + 1) % 64));
}

TEST_F(EmulatorTest, WarpSynchronousSharedMemoryOrderedBySyncwarpIsNotARace) {
  float* x = DeviceCopy(Iota(64));
  float* out = DeviceCopy(std::vector<float>(1, 0.f));
  msemu::ScopedCapture capture;
  Launch<TreeSumKernel>(1, 64, 0, nullptr, x, out);
  EXPECT_TRUE(capture.reports().empty()) << AllReports(capture);
  EXPECT_EQ(HostCopy(out, 1)[0], 63.f * 64 / 2);
}

TEST_F(EmulatorTest, ReadPastTheEndIsAnIllegalAddressNamingTheThread) {
  float* x = DeviceCopy(Iota(100));
  float* y = DeviceCopy(std::vector<float>(100, 0.f));
  {
    msemu::ScopedCapture capture;
    Launch<CopyKernel>(1, 128, 0, nullptr, x, y, 100, 0);
    EXPECT_TRUE(capture.reports().empty()) << AllReports(capture);
  }
  msemu::ScopedCapture capture;
  Launch<CopyKernel>(1, 128, 0, nullptr, x, y, 100, 1);
  EXPECT_TRUE(Reported(capture, {"invalid global read", "CopyKernel", "thread (100,0,0)", "past the end"}))
      << AllReports(capture);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);  // sticky, as on a GPU
}

TEST_F(EmulatorTest, HostPointerInAKernelIsAnIllegalAddress) {
  std::vector<float> host = Iota(32);
  float* y = DeviceCopy(std::vector<float>(32, 0.f));
  msemu::ScopedCapture capture;
  Launch<CopyKernel>(1, 32, 0, nullptr, host.data(), y, 32, 0);
  EXPECT_TRUE(Reported(capture, {"invalid global read", "CopyKernel", "not device memory"})) << AllReports(capture);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
}

TEST_F(EmulatorTest, ReadOfDeviceMemoryNeverWrittenIsReported) {
  float* x = nullptr;
  ASSERT_EQ(cudaMalloc(&x, 16 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemset(x, 0, 8 * sizeof(float)), cudaSuccess);  // the first half only
  float* y = DeviceCopy(std::vector<float>(16, 0.f));
  msemu::ScopedCapture capture;
  Launch<CopyKernel>(1, 16, 0, nullptr, x, y, 16, 0);
  EXPECT_TRUE(Reported(capture, {"uninitialized global read", "CopyKernel", "thread (8,0,0)", "offset 32"}))
      << AllReports(capture);
  EXPECT_FALSE(Reported(capture, {"thread (7,0,0)"})) << AllReports(capture);
}

TEST_F(EmulatorTest, ReadOfSharedMemoryNeverWrittenIsReported) {
  float* out = DeviceCopy(std::vector<float>(1, 0.f));
  msemu::ScopedCapture capture;
  Launch<HalfWrittenKernel>(1, 32, 0, nullptr, out);
  EXPECT_TRUE(Reported(capture, {"uninitialized shared read", "HalfWrittenKernel", "thread (0,0,0)"}))
      << AllReports(capture);
}

TEST_F(EmulatorTest, SyncthreadsNotReachedByEveryThreadIsReported) {
  float* y = DeviceCopy(std::vector<float>(64, 0.f));
  msemu::ScopedCapture capture;
  Launch<EarlyExitKernel>(1, 64, 0, nullptr, y);
  EXPECT_TRUE(Reported(capture, {"__syncthreads not reached by every thread", "EarlyExitKernel",
                                 "exited without reaching it"}))
      << AllReports(capture);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
}

TEST_F(EmulatorTest, WarpCollectiveMissingALaneOfItsMaskIsReported) {
  float* y = DeviceCopy(std::vector<float>(32, 0.f));
  {
    msemu::ScopedCapture capture;
    Launch<MissingLaneKernel>(1, 32, 0, nullptr, y, -1);
    EXPECT_TRUE(capture.reports().empty()) << AllReports(capture);
    const std::vector<float> got = HostCopy(y, 32);
    for (float v : got) EXPECT_EQ(v, 31.f * 32 / 2);
  }
  msemu::ScopedCapture capture;
  Launch<MissingLaneKernel>(1, 32, 0, nullptr, y, 5);
  EXPECT_TRUE(Reported(capture, {"warp collective never completes", "MissingLaneKernel", "__shfl_xor_sync",
                                 "lane 5 named in the mask exited"}))
      << AllReports(capture);
}

TEST_F(EmulatorTest, OneBarrierMetAtTwoCallSitesIsReported) {
  float* y = DeviceCopy(std::vector<float>(64, 0.f));
  msemu::ScopedCapture capture;
  Launch<TwoSitesKernel>(1, 64, 0, nullptr, y);
  EXPECT_TRUE(Reported(capture, {"divergent __syncthreads", "TwoSitesKernel", "device_emulator_test.cu:",
                                 "one barrier met at two call sites"}))
      << AllReports(capture);
}

TEST_F(EmulatorTest, ReadsOrderedBySyncwarpBeforeAWriteAreNotARace) {
  int* y = DeviceCopy(std::vector<int>(32, 0));
  msemu::ScopedCapture capture;
  Launch<SyncwarpReadersKernel>(1, 32, 0, nullptr, y);
  EXPECT_TRUE(capture.reports().empty()) << AllReports(capture);
  for (int v : HostCopy(y, 32)) EXPECT_EQ(v, 1);
}

TEST_F(EmulatorTest, APartialMaskReductionIsCleanAndItsLaneZeroRight) {
  float* y = DeviceCopy(std::vector<float>(1, 0.f));
  msemu::ScopedCapture capture;
  Launch<PartialMaskSumKernel>(1, 32, 0, nullptr, y);
  EXPECT_TRUE(capture.reports().empty()) << AllReports(capture);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(HostCopy(y, 1)[0], 15.f * 16 / 2);
}

TEST_F(EmulatorTest, APlainStoreRacingOtherThreadsAtomicsIsReported) {
  int* out = DeviceCopy(std::vector<int>(1, 0));
  msemu::ScopedCapture capture;
  Launch<StoreThenAtomicsKernel>(1, 64, 0, nullptr, out);
  EXPECT_TRUE(Reported(capture, {"race on shared memory", "StoreThenAtomicsKernel", "atomically updates",
                                 "thread (0,0,0) wrote it plainly"}))
      << AllReports(capture);
}

TEST_F(EmulatorTest, DynamicSharedMemoryPastItsEndIsNamed) {
  float* y = DeviceCopy(std::vector<float>(64, 0.f));
  msemu::ScopedCapture capture;
  Launch<DynamicSharedKernel>(1, 64, 32 * sizeof(float), nullptr, y);  // 64 threads, room for 32
  EXPECT_TRUE(Reported(capture, {"DynamicSharedKernel", "past the end of the block's 128 bytes of dynamic shared"}))
      << AllReports(capture);
}

TEST(EmulatorDeathTest, StackOverflowIsOneLineNamingTheThread) {
  float* y = nullptr;
  ASSERT_EQ(cudaMalloc(&y, sizeof(float)), cudaSuccess);
  EXPECT_EXIT(Launch<BigLocalKernel>(1, 1, 0, nullptr, y, 0), ::testing::ExitedWithCode(86),
              "cuda emulator: stack overflow: kernel .*BigLocalKernel \\(device_emulator_test\\.cu\\) "
              "block \\(0,0,0\\) thread \\(0,0,0\\)");
}

// ---- Semantics ----------------------------------------------------------------------

TEST_F(EmulatorTest, WarpCollectivesFollowTheDocumentedLaneRules) {
  int* out = DeviceCopy(std::vector<int>(32 * 5, -1));
  Launch<WarpKernel>(1, 32, 0, nullptr, out);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<int> got = HostCopy(out, 32 * 5);
  for (int lane = 0; lane < 32; ++lane) {
    SCOPED_TRACE(lane);
    EXPECT_EQ(got[lane * 5 + 0], 31 * 32 / 2);
    EXPECT_EQ(got[lane * 5 + 1], lane % 8 == 0 ? lane : lane - 1);  // the segment's first lane keeps its own
    EXPECT_EQ(got[lane * 5 + 2], lane % 16 >= 14 ? lane : lane + 2);
    EXPECT_EQ(got[lane * 5 + 3], lane / 8 * 8 + 3);
    EXPECT_EQ(static_cast<unsigned>(got[lane * 5 + 4]), 0xaaaaaaaau);
  }
}

TEST_F(EmulatorTest, LaunchLimitsAreTheDevicesLimits) {
  float* y = DeviceCopy(std::vector<float>(2048, 0.f));
  Launch<DynamicSharedKernel>(1, 1025, 0, nullptr, y);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  Launch<DynamicSharedKernel>(dim3(1, 65536), 32, 0, nullptr, y);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // not sticky: read once
  // Dynamic shared memory above 48 KB only after opting in, and never above 227 KB.
  Launch<DynamicSharedKernel>(1, 256, size_t(64) << 10, nullptr, y);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  ASSERT_EQ(cudaFuncSetAttribute(reinterpret_cast<const void*>(&DynamicSharedKernel),
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10),
            cudaSuccess);
  Launch<DynamicSharedKernel>(1, 256, size_t(64) << 10, nullptr, y);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<float> got = HostCopy(y, 256);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(got[i], float(255 - i));
  EXPECT_EQ(cudaFuncSetAttribute(reinterpret_cast<const void*>(&DynamicSharedKernel),
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, 228 << 10),
            cudaErrorInvalidValue);
}

TEST_F(EmulatorTest, AtomicsSumOverTheGrid) {
  int* counter = DeviceCopy(std::vector<int>(1, 0));
  float* total = DeviceCopy(std::vector<float>(1, 0.f));
  msemu::ScopedCapture capture;
  Launch<AtomicKernel>(4, 96, 0, nullptr, counter, total);
  EXPECT_TRUE(capture.reports().empty()) << AllReports(capture);
  EXPECT_EQ(HostCopy(counter, 1)[0], 4 * 96);
  EXPECT_EQ(HostCopy(total, 1)[0], 4 * 96 * 0.5f);
}

// The work tally counts what ran (launches with their threads, copies), not what the
// emulator refused.
TEST_F(EmulatorTest, WorkTallyCountsLaunchesThreadsAndCopies) {
  int* counter = DeviceCopy(std::vector<int>(1, 0));
  float* total = DeviceCopy(std::vector<float>(1, 0.f));
  auto count = [](const std::string& part) {  // (calls, threads) of the names holding `part`
    std::pair<uint64_t, uint64_t> sum{0, 0};
    for (const auto& [name, tally] : msemu::WorkTallies()) {
      if (name.find(part) != std::string::npos) sum.first += tally.calls, sum.second += tally.threads;
    }
    return sum;
  };
  const auto kernels0 = count("AtomicKernel"), copies0 = count("cudaMemcpy");
  Launch<AtomicKernel>(dim3(3, 2), 96, 0, nullptr, counter, total);
  Launch<AtomicKernel>(1, 2048, 0, nullptr, counter, total);  // refused: too many threads
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(HostCopy(counter, 1)[0], 6 * 96);
  const auto kernels1 = count("AtomicKernel"), copies1 = count("cudaMemcpy");
  EXPECT_EQ(kernels1.first - kernels0.first, 1u);
  EXPECT_EQ(kernels1.second - kernels0.second, 6u * 96u);
  EXPECT_EQ(copies1.first - copies0.first, 1u);  // HostCopy's
  EXPECT_EQ(copies1.second - copies0.second, 0u);
}

// Copies count the bytes they move, and apart those that went to the host (what a decoded
// token's greedy choice costs: tests/cuda/decoder_cuda_test.cc).
TEST_F(EmulatorTest, WorkTallyCountsTheBytesOfCopiesAndThoseToTheHost) {
  auto bytes = [] {  // (bytes, bytes to the host) of the copies
    std::pair<uint64_t, uint64_t> sum{0, 0};
    for (const auto& [name, tally] : msemu::WorkTallies()) {
      if (name.starts_with("cudaMemcpy")) sum.first += tally.bytes, sum.second += tally.bytes_to_host;
    }
    return sum;
  };
  const auto b0 = bytes();
  float* x = DeviceCopy(std::vector<float>(5, 1.f));  // 20 bytes in
  EXPECT_EQ(HostCopy(x, 2)[1], 1.f);                  // 8 bytes out
  const auto b1 = bytes();
  EXPECT_EQ(b1.first - b0.first, 28u);
  EXPECT_EQ(b1.second - b0.second, 8u);
}

TEST_F(EmulatorTest, DevicePropertiesAreAnSm90Device) {
  cudaDeviceProp prop;
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_EQ(prop.major, 9);
  EXPECT_EQ(prop.minor, 0);
  EXPECT_EQ(prop.warpSize, 32);
  EXPECT_EQ(prop.maxThreadsPerBlock, 1024);
  EXPECT_EQ(prop.sharedMemPerBlock, size_t(48) << 10);
  EXPECT_EQ(prop.sharedMemPerBlockOptin, size_t(227) << 10);
  EXPECT_EQ(prop.maxGridSize[1], 65535);
}

TEST_F(EmulatorTest, CopiesCheckWhichSideIsDeviceMemory) {
  std::vector<float> host(8, 1.f);
  float* device = DeviceCopy(host);
  msemu::ScopedCapture capture;
  EXPECT_EQ(cudaMemcpy(host.data(), host.data(), 32, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_TRUE(Reported(capture, {"cudaMemcpy", "destination", "not device memory"})) << AllReports(capture);
  EXPECT_EQ(cudaMemcpy(device, device, 32, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_TRUE(Reported(capture, {"cudaMemcpy", "source", "is device memory"})) << AllReports(capture);
  EXPECT_EQ(cudaMemcpy(host.data(), device, 36, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_TRUE(Reported(capture, {"past its end"})) << AllReports(capture);
}

TEST_F(EmulatorTest, AllocationsCountAgainstTheDevicesCapacity) {
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, total + 1), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// The emulated device's memory is the host's: by default its capacity is at most what the
// host has (80 GiB on a 23 GiB machine let a device-memory check pass what the host then
// could not hold).
TEST_F(EmulatorTest, TheDefaultCapacityIsNoMoreThanTheHostsMemory) {
  if (std::getenv("MULTISCREEN_EMULATED_GPU_MEMORY") != nullptr) GTEST_SKIP() << "the capacity is set";
  FILE* f = std::fopen("/proc/meminfo", "r");
  ASSERT_NE(f, nullptr);
  unsigned long long kib = 0;
  char line[256];
  while (std::fgets(line, sizeof line, f) != nullptr && std::sscanf(line, "MemTotal: %llu kB", &kib) != 1) {
  }
  std::fclose(f);
  ASSERT_GT(kib, 0u);
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  EXPECT_LE(total, size_t(kib) << 10);
  EXPECT_LE(total, size_t(80) << 30);
}

TEST_F(EmulatorTest, StreamQueryIsNotReadyWhileQueuedWorkRuns) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaLaunchHostFunc(
                stream, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(200)); }, nullptr),
            cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady);
  cudaEvent_t event = nullptr;
  ASSERT_EQ(cudaEventCreate(&event), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, stream), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(event), cudaErrorNotReady);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(stream), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(event), cudaSuccess);
  cudaEventDestroy(event);
  cudaStreamDestroy(stream);
}

// Run by ctest with MULTISCREEN_EMULATED_GPUS=4 CUDA_VISIBLE_DEVICES=2,0,7,1 (7 does not
// exist, so the list ends there); skipped otherwise.
TEST(EmulatedDevices, VisibleDevicesFollowCudaVisibleDevices) {
  const char* list = std::getenv("CUDA_VISIBLE_DEVICES");
  if (list == nullptr || std::string(list) != "2,0,7,1") GTEST_SKIP() << "needs CUDA_VISIBLE_DEVICES=2,0,7,1";
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(count, 2);
  char bus[32];
  ASSERT_EQ(cudaDeviceGetPCIBusId(bus, sizeof(bus), 0), cudaSuccess);
  EXPECT_STREQ(bus, "0000:1A:00.0");  // node device 2
  ASSERT_EQ(cudaDeviceGetPCIBusId(bus, sizeof(bus), 1), cudaSuccess);
  EXPECT_STREQ(bus, "0000:18:00.0");  // node device 0
  EXPECT_EQ(cudaSetDevice(2), cudaErrorInvalidDevice);
}

}  // namespace
