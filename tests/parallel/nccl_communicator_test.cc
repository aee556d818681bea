// NcclCommunicator on GPU buffers: every operation against values each rank
// computes alone, and the timeout that turns a stuck operation into a prompt
// job abort. Needs one CUDA device per rank; skipped (loudly) without.
// Runs as a single process (bootstrap: SingleProcessCommunicator) or under
// mpirun (bootstrap: MPI, so the ncclUniqueId travels over MPI).
#include <gtest/gtest.h>

#include <cuda_runtime.h>
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "kernels/buffer.h"
#include "parallel/mpi_communicator.h"
#include "parallel/nccl_communicator.h"

namespace multiscreen {
namespace {

float ValueOf(int rank, int64_t i) { return static_cast<float>(rank * 100 + i % 89) * 0.25f; }

bool MpiActive() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0;
}

class NcclCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (MpiActive()) {
      bootstrap_ = MpiCommunicator::Duplicate(MPI_COMM_WORLD);
    } else {
      bootstrap_ = std::make_unique<SingleProcessCommunicator>();
    }
    int devices = 0;
    if (!CudaAvailable() || cudaGetDeviceCount(&devices) != cudaSuccess || devices < bootstrap_->size()) {
      std::fprintf(stderr,
                   "\n*** SKIPPED: NcclCommunicator needs %d CUDA device(s) and this machine has %d: the NCCL path "
                   "is compiled but NOT tested here ***\n\n",
                   bootstrap_->size(), devices);
      GTEST_SKIP() << "no CUDA device per rank";
    }
    auto comm = NcclCommunicator::Create(*bootstrap_, bootstrap_->rank() % devices, NcclOptions{60});
    ASSERT_TRUE(comm.ok()) << comm.status();
    comm_ = std::move(*comm);
  }

  // Device copies of host vectors and back.
  template <typename T>
  Buffer Up(const std::vector<T>& host) {
    auto b = Buffer::Allocate(Device::kCuda, host.size() * sizeof(T));
    EXPECT_TRUE(b.ok()) << b.status();
    EXPECT_TRUE(b->Upload(host.data(), host.size() * sizeof(T)).ok());
    return std::move(*b);
  }
  template <typename T>
  std::vector<T> Down(const Buffer& b) {
    std::vector<T> host(b.bytes() / sizeof(T));
    EXPECT_TRUE(b.Download(host.data(), b.bytes()).ok());
    return host;
  }

  std::unique_ptr<Communicator> bootstrap_;
  std::unique_ptr<NcclCommunicator> comm_;
};

TEST_F(NcclCommunicatorTest, AllReduceSumsFloatsAndMaxesDoubles) {
  const int n = comm_->size(), r = comm_->rank();
  std::vector<float> f(1000);
  std::vector<double> d(10);
  for (int i = 0; i < 1000; ++i) f[i] = ValueOf(r, i);
  for (int i = 0; i < 10; ++i) d[i] = r * 0.5 + i;
  Buffer fb = Up(f);
  comm_->AllReduce(fb.as<float>(), 1000, ReduceOp::kSum);
  // Doubles are host memory on every communicator (kernels/communicator.h).
  comm_->AllReduce(d.data(), 10, ReduceOp::kMax);
  const auto fs = Down<float>(fb);
  const auto& ds = d;
  for (int i = 0; i < 1000; ++i) {
    float sum = 0;
    for (int k = 0; k < n; ++k) sum += ValueOf(k, i);
    EXPECT_FLOAT_EQ(fs[i], sum);
  }
  for (int i = 0; i < 10; ++i) EXPECT_EQ(ds[i], (n - 1) * 0.5 + i);
}

TEST_F(NcclCommunicatorTest, ReduceScatterThenAllGatherInPlaceIsTheAllReduce) {
  const int n = comm_->size(), r = comm_->rank();
  const int64_t count = 257;
  std::vector<float> v(n * count);
  for (int64_t i = 0; i < n * count; ++i) v[i] = ValueOf(r, i);
  Buffer b = Up(v);
  float* p = b.as<float>();
  comm_->ReduceScatter(p, p + r * count, count, ReduceOp::kSum);
  comm_->AllGather(p + r * count, p, count);
  const auto got = Down<float>(b);
  for (int64_t i = 0; i < n * count; ++i) {
    float sum = 0;
    for (int k = 0; k < n; ++k) sum += ValueOf(k, i);
    EXPECT_FLOAT_EQ(got[i], sum) << i;
  }
}

TEST_F(NcclCommunicatorTest, BroadcastAndRingExchangeDeliverTheRightRanksData) {
  const int n = comm_->size(), r = comm_->rank();
  std::vector<float> root_data(64, r == 0 ? 3.5f : 0.0f);
  Buffer bb = Up(root_data);
  comm_->Broadcast(bb.as<float>(), 64, 0);
  for (float x : Down<float>(bb)) EXPECT_EQ(x, 3.5f);
  int64_t host_word[2] = {r == 0 ? 77 : 0, r == 0 ? -5 : 0};  // host bytes (a status, an id)
  comm_->Broadcast(static_cast<void*>(host_word), sizeof(host_word), 0);
  EXPECT_EQ(host_word[0], 77);
  EXPECT_EQ(host_word[1], -5);

  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  std::vector<float> send(4096);
  for (int i = 0; i < 4096; ++i) send[i] = ValueOf(r, i);
  Buffer sb = Up(send), rb = Up(std::vector<float>(4096, 0.0f));
  comm_->SendRecv(sb.as<float>(), 4096, next, rb.as<float>(), 4096, prev);
  const auto got = Down<float>(rb);
  for (int i = 0; i < 4096; i += 97) EXPECT_EQ(got[i], ValueOf(prev, i));
  comm_->Barrier();
}

// An operation stuck behind 10 s of host work on the communicator's stream
// (as when a peer never arrives) must not hang: after the timeout it aborts
// the communicator and the process, naming the operation. Death tests fork, so
// single process only (under mpirun that would take the job down).
TEST_F(NcclCommunicatorTest, AStuckOperationEndsTheProcessAfterTheTimeout) {
  if (MpiActive()) GTEST_SKIP() << "death test runs without mpirun only";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EXIT(
      {
        auto comm = NcclCommunicator::Create(*bootstrap_, 0, NcclOptions{2});
        if (!comm.ok()) std::_Exit(7);
        Buffer b = Up(std::vector<float>(16, 0.0f));
        cudaLaunchHostFunc((*comm)->stream(), [](void*) { std::this_thread::sleep_for(std::chrono::seconds(10)); },
                           nullptr);
        (*comm)->AllReduce(b.as<float>(), 16, ReduceOp::kSum);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(1), "NCCL AllReduce\\(float\\) .*timed out after 2 s");
  // Well before the stuck work would have finished by itself.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 9.0);
}

// NCCL's own errors end the process too, with NCCL's reason: a receive from
// itself without a matching send is invalid usage.
TEST_F(NcclCommunicatorTest, AnNcclErrorEndsTheProcessWithNcclsReason) {
  if (MpiActive()) GTEST_SKIP() << "death test runs without mpirun only";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Buffer b = Up(std::vector<float>(16, 0.0f));
        comm_->Recv(b.as<float>(), 16, 0);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(1), "fatal on .*NCCL Recv \\(rank 0 of 1, GPU 0\\): invalid usage");
}

// A bootstrap group that claims a second rank which never shows up.
class MissingPeerBootstrap final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  Device device() const override { return Device::kCpu; }
  void AllReduce(float*, int64_t, ReduceOp) override {}
  void AllReduce(double*, int64_t, ReduceOp) override {}
  void ReduceScatter(const float*, float*, int64_t, ReduceOp) override {}
  void AllGather(const float*, float*, int64_t) override {}
  void Broadcast(void*, int64_t, int) override {}
  void Broadcast(float*, int64_t, int) override {}
  void Send(const float*, int64_t, int) override {}
  void Recv(float*, int64_t, int) override {}
  void SendRecv(const float*, int64_t, int, float*, int64_t, int) override {}
  void Barrier() override {}
};

TEST_F(NcclCommunicatorTest, InitializationWaitingForAMissingRankTimesOutWithAnError) {
  if (MpiActive()) GTEST_SKIP() << "single process only";
  MissingPeerBootstrap missing;
  const auto t0 = std::chrono::steady_clock::now();
  auto comm = NcclCommunicator::Create(missing, 0, NcclOptions{2});
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
  EXPECT_NE(comm.status().message().find("timed out after 2 s"), std::string::npos) << comm.status();
  EXPECT_LT(waited, 30.0);
}

}  // namespace
}  // namespace multiscreen
