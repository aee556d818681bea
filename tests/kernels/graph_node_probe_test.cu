// The per-node cost of a replayed CUDA graph, probed (issue 42: tools/perf_model.py's
// --graph-node-us is a cited figure until a GPU measures it). N one-thread kernels, each
// adding 1 to a counter, run two ways: launched one by one on a stream, then one
// cudaGraphLaunch of the same N captured; each way at two sizes N1 < N2, each size `reps`
// times, the host timing each repetition from the first launch to cudaStreamSynchronize's
// return (steady_clock; the median of the repetitions). The slopes are the costs per kernel:
//   µs per launch = (t_direct(N2) − t_direct(N1)) / (N2 − N1),
//   µs per node   = (t_graph(N2)  − t_graph(N1))  / (N2 − N1),
// and t_graph(N1) − N1 · µs per node the graph launch's fixed cost (with the wait's).
// The counter proves every launch and every node ran (N · reps each way and size). Printed
// as one line, "graph_node_probe: {json}", which scripts/gpu_check's graph_probe stage keeps.
// Sizes and repetitions from MS_GRAPH_PROBE_NODES ("N1,N2") and MS_GRAPH_PROBE_REPS; the
// defaults (8,32 and 2) are for the emulated device, where the times mean nothing but the
// code path runs; the GPU stage asks for 64,1024 and 30. Skipped, visibly, without a device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cuda/launch.h"

namespace {

__global__ void TickKernel(unsigned* count) { *count += 1; }

using multiscreen::kernels::cuda::Launch;

// The median of `v` (sorted copy; the upper middle for an even count).
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

class GraphNodeProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      cudaGetLastError();
      std::fprintf(stderr, "\n*** SKIPPED: no CUDA device visible; CUDA kernels were compiled but not run ***\n\n");
      GTEST_SKIP() << "no CUDA device visible";
    }
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&count_, sizeof(unsigned)), cudaSuccess);
    ResetCount();
  }
  void TearDown() override {
    if (count_ != nullptr) cudaFree(count_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  void ResetCount() {
    ASSERT_EQ(cudaMemsetAsync(count_, 0, sizeof(unsigned), stream_), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  }
  unsigned Count() {
    unsigned host = 0;
    EXPECT_EQ(cudaMemcpy(&host, count_, sizeof host, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
  void Ticks(int n) {
    for (int i = 0; i < n; ++i) Launch<TickKernel>(dim3(1), dim3(1), 0, stream_, count_);
  }
  // Seconds of each of `reps` repetitions of `issue` (then a wait for the stream).
  template <typename Issue>
  std::vector<double> Time(int reps, Issue issue) {
    std::vector<double> seconds;
    for (int r = 0; r < reps; ++r) {
      const auto start = std::chrono::steady_clock::now();
      issue();
      EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return seconds;
  }
  cudaStream_t stream_ = nullptr;
  unsigned* count_ = nullptr;
};

TEST_F(GraphNodeProbeTest, KernelsLaunchedOneByOneAndAsOneGraphAllRunAndAreTimedPerKernel) {
  int n1 = 8, n2 = 32, reps = 2;
  if (const char* nodes = std::getenv("MS_GRAPH_PROBE_NODES")) {
    ASSERT_EQ(std::sscanf(nodes, "%d,%d", &n1, &n2), 2) << "MS_GRAPH_PROBE_NODES=" << nodes << ": expected N1,N2";
  }
  if (const char* r = std::getenv("MS_GRAPH_PROBE_REPS")) reps = std::atoi(r);
  ASSERT_TRUE(0 < n1 && n1 < n2 && reps > 0) << "need 0 < N1 < N2 and reps > 0";
  double direct[2], graph[2];
  const int sizes[2] = {n1, n2};
  for (int k = 0; k < 2; ++k) {
    const int n = sizes[k];
    Ticks(n);  // warm: the first launches load the module
    ResetCount();
    direct[k] = Median(Time(reps, [&] { Ticks(n); }));
    EXPECT_EQ(Count(), unsigned(n * reps)) << "launched one by one, N = " << n;

    ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
    Ticks(n);
    cudaGraph_t g = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(stream_, &g), cudaSuccess);
    size_t nodes = 0;
    ASSERT_EQ(cudaGraphGetNodes(g, nullptr, &nodes), cudaSuccess);
    EXPECT_EQ(nodes, size_t(n));
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);  // warm: the first launch uploads the graph
    ResetCount();
    graph[k] = Median(Time(reps, [&] { EXPECT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess); }));
    EXPECT_EQ(Count(), unsigned(n * reps)) << "as one graph, N = " << n;
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
  }
  const double per_launch_us = (direct[1] - direct[0]) / (n2 - n1) * 1e6;
  const double per_node_us = (graph[1] - graph[0]) / (n2 - n1) * 1e6;
  const double graph_fixed_us = graph[0] * 1e6 - n1 * per_node_us;
  for (double t : {direct[0], direct[1], graph[0], graph[1]}) EXPECT_TRUE(std::isfinite(t) && t > 0);
  std::printf("graph_node_probe: {\"n1\": %d, \"n2\": %d, \"reps\": %d, \"direct_us\": [%.3f, %.3f], "
              "\"graph_us\": [%.3f, %.3f], \"per_launch_us\": %.4f, \"per_node_us\": %.4f, "
              "\"graph_fixed_us\": %.3f}\n",
              n1, n2, reps, direct[0] * 1e6, direct[1] * 1e6, graph[0] * 1e6, graph[1] * 1e6, per_launch_us,
              per_node_us, graph_fixed_us);
}

}  // namespace
