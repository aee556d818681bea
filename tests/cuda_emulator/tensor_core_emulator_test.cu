// The tensor-core twins (cuda_emulator/tensor_core.cc) on planted bugs: a lane missing
// from mma.sync, ldmatrix rows that are unwritten, misaligned, outside shared memory or
// written by another lane without __syncwarp, cp.async into global memory. Each is
// reported naming the kernel and the instruction; the corrected kernel runs clean. (Their
// results against plain products: tests/kernels/tensor_core_test.cu.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda_emulator/emulator.h"
#include "tests/cuda_emulator/emulator_test.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/tensor_core.cuh"

namespace {

using multiscreen::kernels::cuda::CpAsync16;
using multiscreen::kernels::cuda::Launch;
using multiscreen::kernels::cuda::LdmatrixX4;
using multiscreen::kernels::cuda::MmaM16N8K16Bf16;

// ---- Kernels, each a bug and its fix ------------------------------------------------

// Lane `skip` leaves before the mma the whole warp must execute.
__global__ void MmaSkipKernel(float* out, int skip) {
  if (int(threadIdx.x) == skip) return;
  const uint32_t a[4] = {0x3f803f80u, 0, 0, 0}, b[2] = {0x3f803f80u, 0};  // bf16 ones
  const float c[4] = {0, 0, 0, 0};
  float d[4];
  MmaM16N8K16Bf16(d, a, b, c);
  out[threadIdx.x] = d[0];
}

// Lane L writes row L, then names a row for ldmatrix: kind 0, its own (clean); 1, row 3
// is never written; 2, lane 7's address is 8 bytes into its row; 3, lane 2 names global
// memory; 4, the row lane L − 1 wrote, without __syncwarp (a race); 5, the same after
// __syncwarp (clean).
__global__ void LdmatrixBugKernel(const uint16_t* global, uint32_t* out, int kind) {
  __shared__ __align__(16) uint16_t rows[32][8];
  const int lane = threadIdx.x;
  if (!(kind == 1 && lane == 3)) {
    for (int j = 0; j < 8; ++j) rows[lane][j] = uint16_t(lane * 8 + j);
  }
  const void* row = &rows[lane][0];
  if (kind == 2 && lane == 7) row = &rows[lane][4];
  if (kind == 3 && lane == 2) row = global;
  if (kind == 4 || kind == 5) row = &rows[lane > 0 ? lane - 1 : 0][0];
  if (kind == 5) __syncwarp();
  uint32_t r[4];
  LdmatrixX4(r, row);
  out[lane] = r[0];
}

// ldmatrix of dynamic shared memory (32 rows of 16 bytes); `past` moves lane 31's row
// past the end.
__global__ void LdmatrixDynamicKernel(uint32_t* out, int past) {
  uint16_t* rows = static_cast<uint16_t*>(msemu::DynamicShared());
  const int lane = threadIdx.x;
  for (int j = 0; j < 8; ++j) rows[lane * 8 + j] = uint16_t(j);
  __syncwarp();
  uint32_t r[4];
  LdmatrixX4(r, &rows[(lane + (lane == 31 ? past : 0)) * 8]);
  out[lane] = r[0];
}

// cp.async of 16 bytes per lane into shared memory, or (`wrong`) into global memory.
__global__ void CpAsyncKernel(const uint16_t* source, uint16_t* global_destination, int wrong) {
  __shared__ __align__(16) uint16_t tile[32 * 8];
  const int lane = threadIdx.x;
  CpAsync16(wrong ? global_destination + 8 * lane : &tile[8 * lane], source + 8 * lane);
  multiscreen::kernels::cuda::CpAsyncCommitGroup();
  multiscreen::kernels::cuda::CpAsyncWaitGroup<0>();
  __syncwarp();
  global_destination[lane] = tile[(8 * lane + 8) % 256];
}

// ---- Helpers ----------------------------------------------------------------------

using TensorCoreEmulatorTest = msemu_test::EmulatorTest;
using msemu_test::AllReports;
using msemu_test::Reported;

// ---- Tests --------------------------------------------------------------------------

TEST_F(TensorCoreEmulatorTest, LaneThatSkipsTheMmaIsReported) {
  float* out = DeviceCopy(std::vector<float>(32, 0.f));
  {
    msemu::ScopedCapture capture;
    Launch<MmaSkipKernel>(1, 32, 0, nullptr, out, -1);
    EXPECT_TRUE(capture.reports().empty()) << AllReports(capture);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
  msemu::ScopedCapture capture;
  Launch<MmaSkipKernel>(1, 32, 0, nullptr, out, 5);
  EXPECT_TRUE(Reported(capture, {"warp collective never completes", "MmaSkipKernel",
                                 "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                                 "lane 5 named in the mask exited without reaching it"}))
      << AllReports(capture);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
}

TEST_F(TensorCoreEmulatorTest, MmaInABlockOfFewerThan32ThreadsIsReported) {
  float* out = DeviceCopy(std::vector<float>(32, 0.f));
  msemu::ScopedCapture capture;
  Launch<MmaSkipKernel>(1, 16, 0, nullptr, out, -1);
  EXPECT_TRUE(Reported(capture, {"warp collective never completes", "mma.sync", "names lanes past the block's last"}))
      << AllReports(capture);
}

TEST_F(TensorCoreEmulatorTest, LdmatrixOfRowsTheWarpWroteRunsClean) {
  uint16_t* global = DeviceCopy(std::vector<uint16_t>(8, 0));
  uint32_t* out = DeviceCopy(std::vector<uint32_t>(32, 0));
  for (int kind : {0, 5}) {
    msemu::ScopedCapture capture;
    Launch<LdmatrixBugKernel>(1, 32, 0, nullptr, global, out, kind);
    EXPECT_TRUE(capture.reports().empty()) << "kind " << kind << "\n" << AllReports(capture);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
}

TEST_F(TensorCoreEmulatorTest, LdmatrixOfAnUnwrittenSharedRowIsReported) {
  uint16_t* global = DeviceCopy(std::vector<uint16_t>(8, 0));
  uint32_t* out = DeviceCopy(std::vector<uint32_t>(32, 0));
  msemu::ScopedCapture capture;
  Launch<LdmatrixBugKernel>(1, 32, 0, nullptr, global, out, 1);
  EXPECT_TRUE(Reported(capture, {"uninitialized shared read", "LdmatrixBugKernel", "thread (3,0,0)", "reads 16 bytes"}))
      << AllReports(capture);
}

TEST_F(TensorCoreEmulatorTest, LdmatrixOfAMisalignedRowIsReported) {
  uint16_t* global = DeviceCopy(std::vector<uint16_t>(8, 0));
  uint32_t* out = DeviceCopy(std::vector<uint32_t>(32, 0));
  msemu::ScopedCapture capture;
  Launch<LdmatrixBugKernel>(1, 32, 0, nullptr, global, out, 2);
  EXPECT_TRUE(Reported(capture, {"misaligned ldmatrix.sync.aligned.m8n8.x4.shared.b16", "LdmatrixBugKernel",
                                 "thread (7,0,0)", "not 16-byte aligned"}))
      << AllReports(capture);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMisalignedAddress);
}

TEST_F(TensorCoreEmulatorTest, LdmatrixOfGlobalMemoryIsReported) {
  uint16_t* global = DeviceCopy(std::vector<uint16_t>(8, 0));
  uint32_t* out = DeviceCopy(std::vector<uint32_t>(32, 0));
  msemu::ScopedCapture capture;
  Launch<LdmatrixBugKernel>(1, 32, 0, nullptr, global, out, 3);
  EXPECT_TRUE(Reported(capture, {"ldmatrix.sync.aligned.m8n8.x4.shared.b16 outside shared memory", "LdmatrixBugKernel",
                                 "thread (2,0,0)", "not shared memory"}))
      << AllReports(capture);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
}

// ldmatrix reads each row as the lane that named it, at its arrival: a row another lane
// of the warp wrote with no warp rendezvous since is a race (a GPU orders them only by
// __syncwarp or a barrier).
TEST_F(TensorCoreEmulatorTest, LdmatrixOfARowAnotherLaneWroteWithoutSyncwarpIsARace) {
  uint16_t* global = DeviceCopy(std::vector<uint16_t>(8, 0));
  uint32_t* out = DeviceCopy(std::vector<uint32_t>(32, 0));
  msemu::ScopedCapture capture;
  Launch<LdmatrixBugKernel>(1, 32, 0, nullptr, global, out, 4);
  EXPECT_TRUE(Reported(capture, {"race on shared memory", "LdmatrixBugKernel", "reads 16 bytes"}))
      << AllReports(capture);
}

TEST_F(TensorCoreEmulatorTest, LdmatrixPastTheEndOfDynamicSharedMemoryIsReported) {
  uint32_t* out = DeviceCopy(std::vector<uint32_t>(32, 0));
  {
    msemu::ScopedCapture capture;
    Launch<LdmatrixDynamicKernel>(1, 32, 32 * 16, nullptr, out, 0);
    EXPECT_TRUE(capture.reports().empty()) << AllReports(capture);
  }
  msemu::ScopedCapture capture;
  Launch<LdmatrixDynamicKernel>(1, 32, 32 * 16, nullptr, out, 1);
  EXPECT_TRUE(Reported(capture, {"LdmatrixDynamicKernel", "thread (31,0,0)", "dynamic shared memory"}))
      << AllReports(capture);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
}

TEST_F(TensorCoreEmulatorTest, CpAsyncIntoGlobalMemoryIsReported) {
  std::vector<uint16_t> values(256);
  for (int i = 0; i < 256; ++i) values[i] = uint16_t(i);
  uint16_t* source = DeviceCopy(values);
  uint16_t* destination = DeviceCopy(std::vector<uint16_t>(256, 0));
  {
    msemu::ScopedCapture capture;
    Launch<CpAsyncKernel>(1, 32, 0, nullptr, source, destination, 0);
    EXPECT_TRUE(capture.reports().empty()) << AllReports(capture);
    std::vector<uint16_t> got(32);
    ASSERT_EQ(cudaMemcpy(got.data(), destination, 64, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int lane = 0; lane < 32; ++lane) EXPECT_EQ(got[lane], (8 * lane + 8) % 256) << lane;
  }
  msemu::ScopedCapture capture;
  Launch<CpAsyncKernel>(1, 32, 0, nullptr, source, destination, 1);
  EXPECT_TRUE(Reported(capture, {"cp.async.cg.shared.global outside shared memory", "CpAsyncKernel", "destination"}))
      << AllReports(capture);
}

}  // namespace
