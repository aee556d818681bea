// The process's table stream (kernels/cuda/table_stream.h, issue 42): one created,
// blocking stream per device, the same on every call; a CUDA kernel table issues on it,
// so its ops capture into a graph that replays them (on the legacy default stream, where
// the tables issued before, the capture's first op fails), and legacy-stream work still
// orders with it.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "kernels/cuda/cuda_kernel_table.h"
#include "kernels/cuda/table_stream.h"
#include "tests/cuda_emulator/emulator_test.h"

namespace {

namespace cuda = multiscreen::kernels::cuda;

class TableStreamTest : public msemu_test::EmulatorTest {};

TEST_F(TableStreamTest, OneBlockingStreamPerDeviceTheSameOnEveryCall) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const cudaStream_t s0 = cuda::TableStream();
  EXPECT_NE(s0, nullptr);
  EXPECT_NE(s0, cudaStreamLegacy);
  EXPECT_NE(s0, cudaStreamPerThread);
  EXPECT_EQ(cuda::TableStream(), s0);
  unsigned flags = 1234;
  ASSERT_EQ(cudaStreamGetFlags(s0, &flags), cudaSuccess);
  EXPECT_EQ(flags, unsigned(cudaStreamDefault));  // blocking: orders with the legacy stream
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  ASSERT_GE(devices, 2) << "the test runs with MULTISCREEN_EMULATED_GPUS=2 (tests/cuda_emulator/CMakeLists.txt)";
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  const cudaStream_t s1 = cuda::TableStream();
  EXPECT_NE(s1, s0);
  EXPECT_EQ(cuda::TableStream(), s1);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cuda::TableStream(), s0);
}

TEST_F(TableStreamTest, AKernelTablesOpsCaptureOnTheTableStreamAndReplay) {
  auto table = cuda::MakeCudaKernelTable();
  ASSERT_TRUE(table.ok()) << table.status();
  constexpr int64_t n = 1000;
  std::vector<float> src(n);
  for (int64_t i = 0; i < n; ++i) src[i] = 0.5f * float(i % 37) - 3.f;
  float* a = DeviceCopy(src);
  float* dst = DeviceCopy(std::vector<float>(n, -1.f));
  const cudaStream_t stream = cuda::TableStream();
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  (*table)->Fill(dst, n, 2.f);  // captured: nothing runs until the launch
  (*table)->AddInto(a, n, dst);
  (*table)->Scale(dst, n, 3.f);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  EXPECT_EQ(HostCopy(dst, n), std::vector<float>(n, -1.f));
  std::vector<float> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = (2.f + src[i]) * 3.f;
  for (int replay = 0; replay < 2; ++replay) {
    // A synchronous copy on the legacy stream between replays: it waits for the replay
    // before it, and the next replay for it (the blocking stream's ordering).
    ASSERT_EQ(cudaMemcpy(dst, src.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    EXPECT_EQ(HostCopy(dst, n), want) << "replay " << replay;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace
