// Stream capture and CUDA graphs on the emulated device (cuda_emulator/graph.cc): a
// captured sequence of kernels, a cuBLAS product, copies and memsets runs nothing until
// the graph is launched, then does what the same calls do uncaptured, on the memory as it
// is at each launch; the capture rules of the CUDA runtime return its errors (a
// synchronization or a blocking copy inside a capture, an allocation, a captured event
// used by the host, a wait on uncaptured work) and invalidate the capture; and a replay
// whose captured pointers point into memory freed since is a report naming the node;
// cudaGraphExecUpdate takes a capture of the same topology and refuses another.
#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cuda_emulator/emulator.h"
#include "kernels/cuda/launch.h"
#include "tests/cuda_emulator/emulator_test.h"

namespace {

using multiscreen::kernels::cuda::Launch;
using msemu_test::EmulatorTest;
using msemu_test::Reported;

// y[i] = a·x[i] + y[i], one thread per element; the parameters pass a struct holding a
// pointer too (its pointer is checked at replay as the plain ones are).
struct Scaled {
  const float* x;
  float a;
};
__global__ void AxpyKernel(Scaled in, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += in.a * in.x[i];
}

class GraphTest : public EmulatorTest {
 protected:
  void SetUp() override { ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess); }
  void TearDown() override {
    cudaStreamDestroy(stream_);
    EmulatorTest::TearDown();
  }
  // Begins a capture on stream_, runs `body`, ends it: the graph, or null with the end's error.
  template <typename Body>
  cudaGraph_t Capture(Body body, cudaError_t* ended = nullptr) {
    EXPECT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
    body();
    cudaGraph_t graph = nullptr;
    const cudaError_t e = cudaStreamEndCapture(stream_, &graph);
    if (ended != nullptr) *ended = e;
    return graph;
  }
  cudaStream_t stream_ = nullptr;
};

TEST_F(GraphTest, ACapturedSequenceRunsOnlyWhenLaunchedAndReadsMemoryAsItIsThen) {
  const int n = 8;
  std::vector<float> x(n), y0(n, 1.f);
  for (int i = 0; i < n; ++i) x[i] = float(i);
  float* dx = DeviceCopy(x);
  float* dy = DeviceCopy(y0);
  float* dz = DeviceCopy(std::vector<float>(n * n, 0.f));
  std::vector<float> host(n, -1.f);
  cublasHandle_t blas = nullptr;
  ASSERT_EQ(cublasCreate(&blas), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasSetStream(blas, stream_), CUBLAS_STATUS_SUCCESS);
  const float one = 1.f, zero = 0.f;
  cudaGraph_t graph = Capture([&] {
    Launch<AxpyKernel>(dim3(1), dim3(32), 0, stream_, Scaled{dx, 2.f}, dy, n);  // y = 1 + 2x
    // z = y·xᵀ (n × n, column-major: z[i + j n] = y[i] x[j])
    EXPECT_EQ(cublasSgemm_64(blas, CUBLAS_OP_N, CUBLAS_OP_T, n, n, 1, &one, dy, n, dx, n, &zero, dz, n),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cudaMemcpyAsync(host.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost, stream_), cudaSuccess);
    EXPECT_EQ(cudaMemsetAsync(dx, 0, sizeof(float), stream_), cudaSuccess);  // x[0] = 0 (it is)
  });
  ASSERT_NE(graph, nullptr);
  size_t nodes = 0;
  ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
  EXPECT_EQ(nodes, 4u);
  EXPECT_EQ(HostCopy(dy, n), y0);  // nothing ran while capturing
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int launch = 1; launch <= 2; ++launch) {  // twice: y accumulates, the graph re-reads it
    ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    const std::vector<float> y = HostCopy(dy, n), z = HostCopy(dz, n * n);
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(y[i], 1.f + 2.f * launch * x[i]) << i;
      EXPECT_EQ(host[i], y[i]) << i;  // the captured copy to the host
      for (int j = 0; j < n; ++j) EXPECT_EQ(z[i + j * n], y[i] * x[j]) << i << "," << j;
    }
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cublasDestroy(blas);
}

TEST_F(GraphTest, ASynchronizationInsideACaptureFailsAndInvalidatesIt) {
  float* dy = DeviceCopy(std::vector<float>(4, 0.f));
  cudaError_t ended = cudaSuccess;
  cudaGraph_t graph = Capture(
      [&] {
        EXPECT_EQ(cudaMemsetAsync(dy, 0, 16, stream_), cudaSuccess);
        EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorStreamCaptureUnsupported);
        cudaStreamCaptureStatus status;
        EXPECT_EQ(cudaStreamIsCapturing(stream_, &status), cudaSuccess);
        EXPECT_EQ(status, cudaStreamCaptureStatusInvalidated);
      },
      &ended);
  EXPECT_EQ(ended, cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(graph, nullptr);
  cudaGetLastError();
  // The other rules, each in a capture of its own.
  std::vector<float> back(4);
  const std::vector<std::pair<const char*, std::function<cudaError_t()>>> rules = {
      {"cudaStreamQuery", [&] { return cudaStreamQuery(stream_); }},
      {"cudaDeviceSynchronize", [&] { return cudaDeviceSynchronize(); }},
      {"a blocking cudaMemcpy to the host",
       [&] { return cudaMemcpy(back.data(), dy, 16, cudaMemcpyDeviceToHost); }},
      {"cudaMalloc", [&] {
         void* p = nullptr;
         return cudaMalloc(&p, 16);
       }},
      {"cudaFree", [&] { return cudaFree(dy); }},
  };
  const cudaError_t expected[] = {cudaErrorStreamCaptureUnsupported, cudaErrorStreamCaptureUnsupported,
                                  cudaErrorStreamCaptureImplicit, cudaErrorStreamCaptureUnsupported,
                                  cudaErrorStreamCaptureUnsupported};
  for (size_t i = 0; i < rules.size(); ++i) {
    cudaError_t got = cudaSuccess;
    graph = Capture([&] { got = rules[i].second(); }, &ended);
    EXPECT_EQ(got, expected[i]) << rules[i].first;
    EXPECT_EQ(ended, cudaErrorStreamCaptureInvalidated) << rules[i].first;
    EXPECT_EQ(graph, nullptr) << rules[i].first;
    cudaGetLastError();
  }
  EXPECT_EQ(HostCopy(dy, 4), std::vector<float>(4, 0.f));  // the freed-in-capture buffer is still there
}

TEST_F(GraphTest, CapturedEventsStayInTheirCapture) {
  cudaEvent_t inside = nullptr, outside = nullptr;
  ASSERT_EQ(cudaEventCreate(&inside), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&outside), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(outside, stream_), cudaSuccess);
  cudaError_t ended = cudaSuccess;
  // Recorded and waited on within the capture: fine, and no node; the host may not use it
  // (an error, the capture goes on).
  cudaGraph_t graph = Capture(
      [&] {
        EXPECT_EQ(cudaEventRecord(inside, stream_), cudaSuccess);
        EXPECT_EQ(cudaStreamWaitEvent(stream_, inside, 0), cudaSuccess);
        EXPECT_EQ(cudaEventQuery(inside), cudaErrorCapturedEvent);
        EXPECT_EQ(cudaEventSynchronize(inside), cudaErrorCapturedEvent);
      },
      &ended);
  EXPECT_EQ(ended, cudaSuccess);
  ASSERT_NE(graph, nullptr);
  size_t nodes = 1;
  EXPECT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
  EXPECT_EQ(nodes, 0u);
  cudaGraphDestroy(graph);
  EXPECT_EQ(cudaEventQuery(inside), cudaSuccess);  // the capture is over
  graph = Capture([&] { EXPECT_EQ(cudaStreamWaitEvent(stream_, outside, 0), cudaErrorStreamCaptureIsolation); },
                  &ended);
  EXPECT_EQ(ended, cudaErrorStreamCaptureInvalidated);
  // An event of one capture waited on by another: the two sequences would merge.
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(other, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(inside, other), cudaSuccess);
  graph = Capture([&] { EXPECT_EQ(cudaStreamWaitEvent(stream_, inside, 0), cudaErrorStreamCaptureMerge); }, &ended);
  EXPECT_EQ(ended, cudaErrorStreamCaptureInvalidated);
  cudaGraph_t other_graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(other, &other_graph), cudaSuccess);
  cudaGraphDestroy(other_graph);
  cudaStreamDestroy(other);
  graph = Capture([&] {
    EXPECT_EQ(cudaEventRecord(inside, stream_), cudaSuccess);
    EXPECT_EQ(cudaStreamWaitEvent(stream_, inside, 0), cudaSuccess);
  }, &ended);
  EXPECT_EQ(ended, cudaSuccess);
  ASSERT_NE(graph, nullptr);
  cudaGraphDestroy(graph);
  cudaGetLastError();
  cudaEventDestroy(inside);
  cudaEventDestroy(outside);
}

TEST_F(GraphTest, LegacyStreamWorkDuringACaptureOfABlockingStreamFailsAndInvalidatesIt) {
  float* dy = DeviceCopy(std::vector<float>(4, 0.f));
  const float* dx = DeviceCopy(std::vector<float>(4, 1.f));
  cudaStream_t blocking = nullptr;
  ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
  for (cudaStream_t captured : {blocking, stream_}) {
    ASSERT_EQ(cudaStreamBeginCapture(captured, cudaStreamCaptureModeGlobal), cudaSuccess);
    cudaGetLastError();
    Launch<AxpyKernel>(dim3(1), dim3(32), 0, nullptr, Scaled{dx, 1.f}, dy, 4);  // the legacy stream
    const cudaError_t got = cudaGetLastError();
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(captured, &graph);
    if (captured == blocking) {  // the legacy stream would wait for the captured one
      EXPECT_EQ(got, cudaErrorStreamCaptureImplicit);
      EXPECT_EQ(ended, cudaErrorStreamCaptureInvalidated);
    } else {  // a non-blocking stream's capture does not involve it: the launch runs
      EXPECT_EQ(got, cudaSuccess);
      EXPECT_EQ(ended, cudaSuccess);
      cudaGraphDestroy(graph);
    }
  }
  EXPECT_EQ(HostCopy(dy, 4), std::vector<float>(4, 1.f));  // once: the non-blocking case's
  cudaStreamDestroy(blocking);
  cudaGetLastError();
}

TEST_F(GraphTest, TheLegacyStreamCannotBeCapturedNorOneStreamTwice) {
  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaErrorIllegalState);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);  // empty
  EXPECT_EQ(cudaStreamEndCapture(stream_, &graph), cudaErrorIllegalState);
  cudaGraphDestroy(graph);
  cudaGetLastError();
}

TEST_F(GraphTest, AReplayOnMemoryFreedSinceTheCaptureIsNamed) {
  const int n = 4;
  float* dx = DeviceCopy(std::vector<float>(n, 1.f));
  float* dy = DeviceCopy(std::vector<float>(n, 0.f));
  cudaGraph_t graph = Capture([&] { Launch<AxpyKernel>(dim3(1), dim3(32), 0, stream_, Scaled{dx, 1.f}, dy, n); });
  ASSERT_NE(graph, nullptr);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaFree(dx), cudaSuccess);  // the buffer the struct's pointer names, resized say
  float* again = DeviceCopy(std::vector<float>(2 * n, 1.f));
  (void)again;
  {
    msemu::ScopedCapture reports;
    EXPECT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    EXPECT_TRUE(Reported(reports, {"cudaGraphLaunch: node 0 (AxpyKernel", "the parameter word at byte",
                                   "has been freed since"}))
        << (reports.reports().empty() ? "no report" : reports.reports()[0]);
  }
  EXPECT_EQ(HostCopy(dy, n), std::vector<float>(n, 0.f));  // the node did not run
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// cudaGraphExecUpdate (issue 42: one graph per micro-step, its arguments renewed each step):
// a capture of the same ops with other arguments, scalars and pointers updates the
// executable graph, whose next launch runs the new ones while a launch issued before runs
// the old; one more node, another node type, or a copy in the other direction is refused
// with cudaErrorGraphExecUpdateFailure and the runtime's result, the graph left as it was.
TEST_F(GraphTest, AnUpdateTakesTheArgumentsOfACaptureWithTheSameTopology) {
  const int n = 4;
  float* dx = DeviceCopy(std::vector<float>{1.f, 2.f, 3.f, 4.f});
  float* dx2 = DeviceCopy(std::vector<float>{10.f, 20.f, 30.f, 40.f});
  float* dy = DeviceCopy(std::vector<float>(n, 0.f));
  float* dz = DeviceCopy(std::vector<float>(n, 0.f));
  auto axpy_then_copy = [&](const float* x, float a) {
    return Capture([&] {
      Launch<AxpyKernel>(dim3(1), dim3(32), 0, stream_, Scaled{x, a}, dy, n);
      EXPECT_EQ(cudaMemcpyAsync(dz, dy, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_), cudaSuccess);
    });
  };
  cudaGraph_t first = axpy_then_copy(dx, 1.f);
  ASSERT_NE(first, nullptr);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, first, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);  // issued before the update: y = x
  cudaGraph_t second = axpy_then_copy(dx2, 0.5f);          // another pointer and scalar
  ASSERT_NE(second, nullptr);
  const auto before = msemu::WorkTallies();
  cudaGraphExecUpdateResultInfo info{};
  ASSERT_EQ(cudaGraphExecUpdate(exec, second, &info), cudaSuccess);
  EXPECT_EQ(info.result, cudaGraphExecUpdateSuccess);
  EXPECT_EQ(msemu::WorkTallies()["cudaGraphExecUpdate"].calls, before.count("cudaGraphExecUpdate") != 0
                                                                     ? before.at("cudaGraphExecUpdate").calls + 1
                                                                     : 1u);
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);  // y = x + 0.5·x2
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(HostCopy(dy, n), (std::vector<float>{6.f, 12.f, 18.f, 24.f}));
  EXPECT_EQ(HostCopy(dz, n), HostCopy(dy, n));

  // Refused: one node more (topology), a memset for the kernel (type), a copy to the host
  // for the device-to-device one (its memory types). Each leaves the graph as it was.
  std::vector<float> host(n);
  const std::vector<std::pair<cudaGraph_t, cudaGraphExecUpdateResult>> refused = {
      {Capture([&] {
         Launch<AxpyKernel>(dim3(1), dim3(32), 0, stream_, Scaled{dx, 100.f}, dy, n);
         EXPECT_EQ(cudaMemcpyAsync(dz, dy, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_), cudaSuccess);
         EXPECT_EQ(cudaMemsetAsync(dz, 0, sizeof(float), stream_), cudaSuccess);
       }),
       cudaGraphExecUpdateErrorTopologyChanged},
      {Capture([&] {
         EXPECT_EQ(cudaMemsetAsync(dy, 0, n * sizeof(float), stream_), cudaSuccess);
         EXPECT_EQ(cudaMemcpyAsync(dz, dy, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_), cudaSuccess);
       }),
       cudaGraphExecUpdateErrorNodeTypeChanged},
      {Capture([&] {
         Launch<AxpyKernel>(dim3(1), dim3(32), 0, stream_, Scaled{dx, 100.f}, dy, n);
         EXPECT_EQ(cudaMemcpyAsync(host.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost, stream_), cudaSuccess);
       }),
       cudaGraphExecUpdateErrorParametersChanged}};
  for (const auto& [graph, result] : refused) {
    ASSERT_NE(graph, nullptr);
    info = {};
    EXPECT_EQ(cudaGraphExecUpdate(exec, graph, &info), cudaErrorGraphExecUpdateFailure);
    EXPECT_EQ(info.result, result);
    EXPECT_EQ(info.errorNode, nullptr);
    EXPECT_EQ(cudaGetLastError(), cudaErrorGraphExecUpdateFailure);
    cudaGraphDestroy(graph);
  }
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);  // still x2, 0.5: y += 0.5·x2
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(HostCopy(dy, n), (std::vector<float>{11.f, 22.f, 33.f, 44.f}));
  EXPECT_EQ(HostCopy(dz, n), HostCopy(dy, n));
  EXPECT_EQ(host, std::vector<float>(n, 0.f));  // the refused graph's copy never ran
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(first);
  cudaGraphDestroy(second);
}

}  // namespace
