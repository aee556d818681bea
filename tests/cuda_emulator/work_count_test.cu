// The emulated device's counting (cuda_emulator/emulator.h, "Work accounting") against
// kernels and calls whose work is known: global-memory bytes in 32-byte sectors, once per
// call and direction; mma.sync, ldmatrix and cp.async; cuBLAS's m·n·k and operand bytes;
// copies, memsets and host synchronizations.
#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "cuda_emulator/emulator.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/tensor_core.cuh"
#include "tests/cuda_emulator/emulator_test.h"

namespace {

using multiscreen::kernels::cuda::Launch;

// ---- Kernels with known access patterns ----------------------------------------------

// Thread i reads x[i] for i < n and writes y[i] for i < m (x holds ones: the branch that
// writes y[0] past m never runs, but keeps the compiler from dropping the read).
__global__ void ReadNWriteMKernel(const float* x, float* y, int n, int m) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const float v = i < n ? x[i] : 1.f;
  if (i < m) {
    y[i] = 2.f * v;
  } else if (v != 1.f) {
    y[0] = v;
  }
}

// Every thread reads all of x[0, n) and thread 0 writes the sum: x is touched n·threads
// times, its sectors counted once.
__global__ void ReadAllKernel(const float* x, float* out, int n) {
  float sum = 0;
  for (int i = 0; i < n; ++i) sum += x[i];
  if (blockIdx.x == 0 && threadIdx.x == 0) *out = sum;
}

// Thread i reads x[i·stride]: one float of each sector when stride = 8.
__global__ void StridedKernel(const float* x, float* y, int n, int stride) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i * stride];
}

// Every thread adds 1 to *counter: a read-modify-write of one sector.
__global__ void AtomicCountKernel(int* counter) { atomicAdd(counter, 1); }

// Each warp: cp.async 16 bytes per lane into shared memory, one ldmatrix .x4 of it, and
// `mmas` mma.sync.
__global__ void TensorCoreKernel(const uint16_t* source, float* out, int mmas) {
  __shared__ __align__(16) uint16_t tile[2][32 * 8];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  multiscreen::kernels::cuda::CpAsync16(&tile[warp][8 * lane], source + 8 * lane);
  multiscreen::kernels::cuda::CpAsyncCommitGroup();
  multiscreen::kernels::cuda::CpAsyncWaitGroup<0>();
  __syncwarp();
  uint32_t a[4];
  multiscreen::kernels::cuda::LdmatrixX4(a, &tile[warp][8 * lane]);
  const uint32_t b[2] = {a[0], a[1]};
  float d[4] = {0, 0, 0, 0};
  for (int i = 0; i < mmas; ++i) multiscreen::kernels::cuda::MmaM16N8K16Bf16(d, a, b, d);
  out[threadIdx.x] = d[0];
}

// ---- Helpers ----------------------------------------------------------------------

class WorkCountTest : public msemu_test::EmulatorTest {
 protected:
  void SetUp() override { msemu::SetCounting(true); }
  void TearDown() override {
    msemu::SetCounting(false);
    msemu_test::EmulatorTest::TearDown();
  }
  // The work of the names containing `part` since the last Mark().
  void Mark() { before_ = msemu::WorkTallies(); }
  msemu::WorkTally Since(const std::string& part) {
    msemu::WorkTally sum;
    for (const auto& [name, t] : msemu::WorkBetween(before_, msemu::WorkTallies())) {
      if (name.find(part) == std::string::npos) continue;
      sum.kind = t.kind;
      sum.calls += t.calls;
      sum.threads += t.threads;
      sum.bytes += t.bytes;
      sum.bytes_to_host += t.bytes_to_host;
      sum.bytes_to_device += t.bytes_to_device;
      sum.syncs += t.syncs;
      sum.gemm_mnk += t.gemm_mnk;
      sum.mma += t.mma;
      sum.ldmatrix += t.ldmatrix;
      sum.cp_async += t.cp_async;
      sum.bytes_read += t.bytes_read;
      sum.bytes_written += t.bytes_written;
    }
    return sum;
  }
  std::map<std::string, msemu::WorkTally> before_;
};

// ---- Global memory ------------------------------------------------------------------

// A kernel that reads N floats and writes M counts 4N bytes read and 4M written (N, M
// multiples of 8: whole sectors), per launch: a second launch counts them again.
TEST_F(WorkCountTest, ReadsNFloatsAndWritesMCounts4NAnd4M) {
  constexpr int n = 1000, m = 600;
  const float* x = DeviceCopy(std::vector<float>(n, 1.f));
  float* y = DeviceCopy(std::vector<float>(n, 0.f));
  Mark();
  Launch<ReadNWriteMKernel>(8, 128, 0, nullptr, x, y, n, m);
  // Named with its file: kernels of two files' anonymous namespaces may share a name.
  msemu::WorkTally t = Since("ReadNWriteMKernel (work_count_test.cu)");
  EXPECT_EQ(t.kind, msemu::WorkKind::kKernel);
  EXPECT_EQ(t.calls, 1u);
  EXPECT_EQ(t.threads, 1024u);
  EXPECT_EQ(t.bytes_read, 4u * n);
  EXPECT_EQ(t.bytes_written, 4u * m);
  Launch<ReadNWriteMKernel>(8, 128, 0, nullptr, x, y, m, n);  // reads 600, writes 1000
  t = Since("ReadNWriteMKernel");
  EXPECT_EQ(t.calls, 2u);
  EXPECT_EQ(t.bytes_read, 4u * (n + m));
  EXPECT_EQ(t.bytes_written, 4u * (m + n));
}

// Unique sectors: every thread of 4 blocks reading all of x counts x once.
TEST_F(WorkCountTest, RepeatedReadsWithinALaunchCountOnce) {
  constexpr int n = 256;
  const float* x = DeviceCopy(std::vector<float>(n, 1.f));
  float* out = DeviceCopy(std::vector<float>(1, 0.f));
  Mark();
  Launch<ReadAllKernel>(4, 64, 0, nullptr, x, out, n);
  const msemu::WorkTally t = Since("ReadAllKernel");
  EXPECT_EQ(t.bytes_read, 4u * n);
  EXPECT_EQ(t.bytes_written, 32u);  // one float: its whole sector
}

// The granularity: a 4-byte read in each sector counts 32 bytes (what a GPU moves), a
// 12-byte read across a sector boundary two sectors, an atomic a sector read and written.
TEST_F(WorkCountTest, SectorGranularityOverCountsSparseAccesses) {
  constexpr int n = 64;
  const float* x = DeviceCopy(std::vector<float>(8 * n, 1.f));
  float* y = DeviceCopy(std::vector<float>(n, 0.f));
  Mark();
  Launch<StridedKernel>(1, n, 0, nullptr, x, y, n, 8);
  msemu::WorkTally t = Since("StridedKernel");
  EXPECT_EQ(t.bytes_read, 32u * n);
  EXPECT_EQ(t.bytes_written, 4u * n);
  Mark();
  Launch<StridedKernel>(1, 3, 0, nullptr, x + 7, y, 3, 1);  // x[7..9]: bytes 28..40
  t = Since("StridedKernel");
  EXPECT_EQ(t.bytes_read, 64u);
  int* counter = DeviceCopy(std::vector<int>(1, 0));
  Mark();
  Launch<AtomicCountKernel>(2, 64, 0, nullptr, counter);
  t = Since("AtomicCountKernel");
  EXPECT_EQ(HostCopy(counter, 1)[0], 128);
  EXPECT_EQ(t.bytes_read, 32u);
  EXPECT_EQ(t.bytes_written, 32u);
}

// Off (the default), bytes are not counted; launches and threads still are.
TEST_F(WorkCountTest, CountingOffCountsNoBytes) {
  msemu::SetCounting(false);
  constexpr int n = 1000;
  const float* x = DeviceCopy(std::vector<float>(n, 1.f));
  float* y = DeviceCopy(std::vector<float>(n, 0.f));
  Mark();
  Launch<ReadNWriteMKernel>(8, 128, 0, nullptr, x, y, n, n);
  const msemu::WorkTally t = Since("ReadNWriteMKernel");
  EXPECT_EQ(t.calls, 1u);
  EXPECT_EQ(t.threads, 1024u);
  EXPECT_EQ(t.bytes_read, 0u);
  EXPECT_EQ(t.bytes_written, 0u);
}

// ---- Tensor cores -------------------------------------------------------------------

// Two warps, each 3 mma.sync and one ldmatrix (warp instructions); 64 cp.async (threads).
TEST_F(WorkCountTest, TensorCoreInstructionsPerWarpAndCpAsyncPerThread) {
  const uint16_t* source = DeviceCopy(std::vector<uint16_t>(32 * 8, 0x3f80));
  float* out = DeviceCopy(std::vector<float>(64, 0.f));
  Mark();
  Launch<TensorCoreKernel>(1, 64, 0, nullptr, source, out, 3);
  const msemu::WorkTally t = Since("TensorCoreKernel");
  EXPECT_EQ(t.mma, 6u);
  EXPECT_EQ(t.ldmatrix, 2u);
  EXPECT_EQ(t.cp_async, 64u);
  EXPECT_EQ(t.bytes_read, 32u * 8 * 2);  // both warps read the same 512 bytes: once
  EXPECT_EQ(t.bytes_written, 64u * 4);
}

// ---- cuBLAS, copies, memsets, synchronizations ------------------------------------------

// C (16×8) = A (16×24) · B (24×8), fp32: m·n·k = 3072; A and B read, C written; with
// beta = 1 C is read too. The entry names the shape.
TEST_F(WorkCountTest, GemmCountsMnkAndItsOperands) {
  cublasHandle_t blas;
  ASSERT_EQ(cublasCreate(&blas), CUBLAS_STATUS_SUCCESS);
  const float* a = DeviceCopy(std::vector<float>(16 * 24, 1.f));
  const float* b = DeviceCopy(std::vector<float>(24 * 8, 1.f));
  float* c = DeviceCopy(std::vector<float>(16 * 8, 0.f));
  const float one = 1.f, zero = 0.f;
  Mark();
  ASSERT_EQ(cublasSgemm_64(blas, CUBLAS_OP_N, CUBLAS_OP_N, 16, 8, 24, &one, a, 16, b, 24, &zero, c, 16),
            CUBLAS_STATUS_SUCCESS);
  msemu::WorkTally t = Since("cublasSgemm 16x8x24 op(A)=N op(B)=N f32,f32->f32 beta=0");
  EXPECT_EQ(t.kind, msemu::WorkKind::kLibrary);
  EXPECT_EQ(t.calls, 1u);
  EXPECT_EQ(t.gemm_mnk, 16u * 8 * 24);
  EXPECT_EQ(t.bytes_read, 4u * (16 * 24 + 24 * 8));
  EXPECT_EQ(t.bytes_written, 4u * 16 * 8);
  Mark();
  ASSERT_EQ(cublasSgemm_64(blas, CUBLAS_OP_N, CUBLAS_OP_N, 16, 8, 24, &one, a, 16, b, 24, &one, c, 16),
            CUBLAS_STATUS_SUCCESS);
  t = Since("cublasSgemm 16x8x24 op(A)=N op(B)=N f32,f32->f32 beta=1");
  EXPECT_EQ(t.gemm_mnk, 16u * 8 * 24);
  EXPECT_EQ(t.bytes_read, 4u * (16 * 24 + 24 * 8 + 16 * 8));
  EXPECT_EQ(HostCopy(c, 1)[0], 48.f);
  cublasDestroy(blas);
}

// Copies count their direction's bytes; a device-to-device copy and a memset count the
// device memory they read and write; cudaStreamSynchronize and a cudaMemcpy to the host
// are host synchronizations, a cudaMemcpyAsync is not.
TEST_F(WorkCountTest, CopiesMemsetsAndSynchronizations) {
  float* x = DeviceCopy(std::vector<float>(64, 1.f));  // not marked: before Mark()
  float* y = nullptr;
  ASSERT_EQ(cudaMalloc(&y, 64 * sizeof(float)), cudaSuccess);
  std::vector<float> host(64, 2.f);
  Mark();
  ASSERT_EQ(cudaMemcpyAsync(x, host.data(), 256, cudaMemcpyHostToDevice, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(y, 0, 128, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(y + 32, x, 128, cudaMemcpyDeviceToDevice, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(host.data(), y, 64, cudaMemcpyDeviceToHost, nullptr), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  EXPECT_EQ(HostCopy(y, 64)[40], 2.f);  // cudaMemcpy: 256 bytes to the host, a sync
  const msemu::WorkTally async = Since("cudaMemcpyAsync"), blocking = Since("cudaMemcpy"),
                         memset = Since("cudaMemsetAsync"), sync = Since("cudaStreamSynchronize");
  EXPECT_EQ(async.calls, 3u);
  EXPECT_EQ(async.bytes_to_device, 256u);
  EXPECT_EQ(async.bytes_to_host, 64u);
  EXPECT_EQ(async.bytes_read, 128u);     // the device-to-device copy's
  EXPECT_EQ(async.bytes_written, 128u);
  EXPECT_EQ(async.syncs, 0u);
  EXPECT_EQ(blocking.calls - async.calls, 1u);  // "cudaMemcpy" holds "cudaMemcpyAsync" too
  EXPECT_EQ(blocking.bytes_to_host - async.bytes_to_host, 256u);
  EXPECT_EQ(blocking.syncs, 1u);
  EXPECT_EQ(memset.kind, msemu::WorkKind::kMemset);
  EXPECT_EQ(memset.bytes_written, 128u);
  EXPECT_EQ(sync.kind, msemu::WorkKind::kSync);
  EXPECT_EQ(sync.syncs, 1u);
}

}  // namespace
