// NCCL on the emulated device (cuda_emulator/nccl.cc) between processes: fork() makes
// the ranks, each on its own emulated device (MULTISCREEN_EMULATED_GPUS=4), the unique
// id made by the parent travels through the fork, and each rank reports by its exit
// status (0: all its checks held; the failed check is printed on stderr). Results are
// compared bit for bit with a reference combined in rank order on the host; the error
// paths (exited peer, abort, mismatched calls, bad buffers, duplicate GPU) must end
// promptly with NCCL's error codes.
#include <gtest/gtest.h>

#include <cuda_runtime.h>
#include <nccl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cuda_emulator/emulator.h"

namespace {

// Before any CUDA call of any rank: four devices on the node, so each rank has its own.
__attribute__((constructor)) void UseFourEmulatedDevices() { setenv("MULTISCREEN_EMULATED_GPUS", "4", 1); }

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int g_rank = -1;  // in a child: its rank

#define CHILD_CHECK(cond)                                                                                \
  do {                                                                                                   \
    if (!(cond)) {                                                                                       \
      std::fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", g_rank, __FILE__, __LINE__, #cond);    \
      return 1;                                                                                          \
    }                                                                                                    \
  } while (0)

#define CHILD_EQ(a, b)                                                                                   \
  do {                                                                                                   \
    const auto va_ = (a);                                                                                \
    const auto vb_ = (b);                                                                                \
    if (!(va_ == vb_)) {                                                                                 \
      std::fprintf(stderr, "rank %d: %s:%d: %s == %s failed: %lld vs %lld\n", g_rank, __FILE__, __LINE__, \
                   #a, #b, static_cast<long long>(va_), static_cast<long long>(vb_));                    \
      return 1;                                                                                          \
    }                                                                                                    \
  } while (0)

#define CHILD_CUDA(call) CHILD_EQ((call), cudaSuccess)
#define CHILD_NCCL(call) CHILD_EQ((call), ncclSuccess)

// Runs body(rank) in `n` forked processes and returns their exit codes (128 + signal
// when killed; 124 when still running after `timeout_s`, then killed). The parent makes
// no CUDA call, so each child starts with a fresh emulator.
std::vector<int> RunRanks(int n, const std::function<int(int)>& body, double timeout_s = 60) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids(n, -1);
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      g_rank = r;
      const int code = body(r);
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(code);
    }
    pids[r] = pid;
  }
  // Reaps as they end (a dead rank must not linger as a zombie).
  std::vector<int> codes(n, -1);
  const Clock::time_point t0 = Clock::now();
  int left = n;
  while (left > 0) {
    for (int r = 0; r < n; ++r) {
      if (codes[r] != -1 || pids[r] < 0) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        --left;
      }
    }
    if (left > 0 && Since(t0) > timeout_s) {
      for (int r = 0; r < n; ++r) {
        if (codes[r] == -1) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          codes[r] = 124;
        }
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return codes;
}

void ExpectAllSucceeded(const std::vector<int>& codes) {
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r << " (see its stderr above)";
}

ncclUniqueId NewId() {
  ncclUniqueId id;
  EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  return id;
}

// The shared-memory file the id names ("/msemu-nccl-…" inside the id).
std::string SegmentPath(const ncclUniqueId& id) {
  const std::string bytes(id.internal, sizeof(id.internal));
  const size_t at = bytes.find("/msemu-nccl-");
  if (at == std::string::npos) return "";
  return "/dev/shm" + std::string(bytes.c_str() + at);
}

bool SegmentExists(const ncclUniqueId& id) {
  struct stat st {};
  return stat(SegmentPath(id).c_str(), &st) == 0;
}

ncclComm_t InitBlocking(int n, int rank, const ncclUniqueId& id) {
  ncclComm_t comm = nullptr;
  if (const ncclResult_t r = ncclCommInitRank(&comm, n, id, rank); r != ncclSuccess) {
    std::fprintf(stderr, "rank %d: ncclCommInitRank: %s\n", rank, ncclGetErrorString(r));
    return nullptr;
  }
  return comm;
}

// Waits as the project does (parallel/nccl_communicator.cc): the async error, then the
// stream. ncclInProgress after `timeout_s`.
// Rank r of n on device r: a communicator initialized in blocking mode and a
// non-blocking stream; false (said on stderr) when either fails.
bool OpenRank(int n, int r, const ncclUniqueId& id, ncclComm_t* comm, cudaStream_t* s) {
  const char* failed = nullptr;
  if (cudaSetDevice(r) != cudaSuccess) {
    failed = "cudaSetDevice";
  } else if ((*comm = InitBlocking(n, r, id)) == nullptr) {
    failed = "ncclCommInitRank";
  } else if (cudaStreamCreateWithFlags(s, cudaStreamNonBlocking) != cudaSuccess) {
    failed = "cudaStreamCreateWithFlags";
  }
  if (failed != nullptr) std::fprintf(stderr, "rank %d: %s failed\n", r, failed);
  return failed == nullptr;
}

ncclResult_t Await(ncclComm_t comm, cudaStream_t stream, double timeout_s = 30) {
  const Clock::time_point t0 = Clock::now();
  for (;;) {
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) return ncclInternalError;
    if (async != ncclSuccess && async != ncclInProgress) return async;
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess && async == ncclSuccess) return ncclSuccess;
    if (q != cudaSuccess && q != cudaErrorNotReady) return ncclUnhandledCudaError;
    if (Since(t0) > timeout_s) return ncclInProgress;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

// True when the stream drains within `timeout_s`.
bool Drains(cudaStream_t stream, double timeout_s) {
  const Clock::time_point t0 = Clock::now();
  while (cudaStreamQuery(stream) == cudaErrorNotReady) {
    if (Since(t0) > timeout_s) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return cudaStreamQuery(stream) == cudaSuccess;
}

template <typename T>
T* Up(const std::vector<T>& host) {
  void* d = nullptr;
  if (cudaMalloc(&d, host.size() * sizeof(T)) != cudaSuccess) return nullptr;
  if (cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) != cudaSuccess) return nullptr;
  return static_cast<T*>(d);
}

template <typename T>
std::vector<T> Down(const T* d, size_t count) {
  std::vector<T> host(count);
  cudaMemcpy(host.data(), d, count * sizeof(T), cudaMemcpyDeviceToHost);
  return host;
}

// Values over many magnitudes and both signs, so that the order of a sum shows in its bits.
double Value(int rank, size_t i) {
  uint64_t h = (static_cast<uint64_t>(rank) + 1) * 0x9e3779b97f4a7c15ULL ^ (i + 1) * 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 31;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 29;
  const double mantissa = static_cast<double>(h % 2001) - 1000.0;
  const int exponent = static_cast<int>((h >> 20) % 41) - 20;
  return std::ldexp(mantissa, exponent);
}

// Bitwise equality of two vectors; the first difference on stderr.
template <typename T>
bool SameBits(const std::vector<T>& got, const std::vector<T>& want, const char* what) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      std::fprintf(stderr, "rank %d: %s: element %zu is %.17g, want %.17g\n", g_rank, what, i,
                   static_cast<double>(got[i]), static_cast<double>(want[i]));
      return false;
    }
  }
  return true;
}

// The rank-ordered sum over ranks 0..n-1 of T(Value(k, i)).
template <typename T>
std::vector<T> RankOrderSum(int n, size_t count, size_t first = 0) {
  std::vector<T> out(count);
  for (size_t i = 0; i < count; ++i) {
    T acc = static_cast<T>(Value(0, first + i));
    for (int k = 1; k < n; ++k) acc += static_cast<T>(Value(k, first + i));
    out[i] = acc;
  }
  return out;
}

template <typename T>
std::vector<T> Values(int rank, size_t count) {
  std::vector<T> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = static_cast<T>(Value(rank, i));
  return v;
}

TEST(NcclEmulatorTest, AllReduceSumsInRankOrderBitIdenticallyOnEveryRankAndMaxes) {
  const int n = 4;
  const ncclUniqueId id = NewId();
  ExpectAllSucceeded(RunRanks(n, [&](int r) {
    ncclComm_t comm = nullptr;
    cudaStream_t s = nullptr;
    CHILD_CHECK(OpenRank(n, r, id, &comm, &s));
    CHILD_CHECK(!SegmentExists(id));  // unlinked once every rank has it mapped
    // float32 in place, over more than one 1 MiB round.
    const size_t nf = 300001;
    float* f = Up(Values<float>(r, nf));
    CHILD_NCCL(ncclAllReduce(f, f, nf, ncclFloat32, ncclSum, comm, s));
    CHILD_NCCL(Await(comm, s));
    CHILD_CHECK(SameBits(Down(f, nf), RankOrderSum<float>(n, nf), "float32 sum"));
    // float64 out of place.
    const size_t nd = 1000;
    double* d_in = Up(Values<double>(r, nd));
    double* d_out = Up(std::vector<double>(nd, 0.0));
    CHILD_NCCL(ncclAllReduce(d_in, d_out, nd, ncclFloat64, ncclSum, comm, s));
    CHILD_NCCL(Await(comm, s));
    CHILD_CHECK(SameBits(Down(d_out, nd), RankOrderSum<double>(n, nd), "float64 sum"));
    CHILD_CHECK(SameBits(Down(d_in, nd), Values<double>(r, nd), "float64 input untouched"));
    // max, float32 and float64.
    float* fm = Up(Values<float>(r, 5000));
    double* dm = Up(Values<double>(r, 5000));
    CHILD_NCCL(ncclAllReduce(fm, fm, 5000, ncclFloat32, ncclMax, comm, s));
    CHILD_NCCL(ncclAllReduce(dm, dm, 5000, ncclFloat64, ncclMax, comm, s));
    CHILD_NCCL(Await(comm, s));
    std::vector<float> want_f(5000);
    std::vector<double> want_d(5000);
    for (size_t i = 0; i < 5000; ++i) {
      double m = Value(0, i);
      for (int k = 1; k < n; ++k) m = std::max(m, Value(k, i));
      want_f[i] = static_cast<float>(m);
      want_d[i] = m;
    }
    CHILD_CHECK(SameBits(Down(fm, 5000), want_f, "float32 max"));
    CHILD_CHECK(SameBits(Down(dm, 5000), want_d, "float64 max"));
    CHILD_NCCL(ncclCommDestroy(comm));
    return 0;
  }));
  EXPECT_FALSE(SegmentExists(id));
}

TEST(NcclEmulatorTest, ReduceScatterGivesEachRankItsBlockOfTheRankOrderedSum) {
  const int n = 3;
  const size_t count = 100003;  // n × count floats: two rounds, blocks across the boundary
  const ncclUniqueId id = NewId();
  ExpectAllSucceeded(RunRanks(n, [&](int r) {
    ncclComm_t comm = nullptr;
    cudaStream_t s = nullptr;
    CHILD_CHECK(OpenRank(n, r, id, &comm, &s));
    const std::vector<float> all_sums = RankOrderSum<float>(n, n * count);
    const std::vector<float> mine(all_sums.begin() + r * count, all_sums.begin() + (r + 1) * count);
    // Out of place.
    float* in = Up(Values<float>(r, n * count));
    float* out = Up(std::vector<float>(count, 0.0f));
    CHILD_NCCL(ncclReduceScatter(in, out, count, ncclFloat32, ncclSum, comm, s));
    CHILD_NCCL(Await(comm, s));
    CHILD_CHECK(SameBits(Down(out, count), mine, "out of place"));
    // In place: the block is this rank's part of the input.
    CHILD_NCCL(ncclReduceScatter(in, in + r * count, count, ncclFloat32, ncclSum, comm, s));
    CHILD_NCCL(Await(comm, s));
    const std::vector<float> got = Down(in, n * count);
    CHILD_CHECK(SameBits(std::vector<float>(got.begin() + r * count, got.begin() + (r + 1) * count), mine,
                         "in place"));
    CHILD_NCCL(ncclCommDestroy(comm));
    return 0;
  }));
}

TEST(NcclEmulatorTest, AllGatherConcatenatesTheRanksInRankOrder) {
  const int n = 3;
  const size_t count = 100003;
  const ncclUniqueId id = NewId();
  ExpectAllSucceeded(RunRanks(n, [&](int r) {
    ncclComm_t comm = nullptr;
    cudaStream_t s = nullptr;
    CHILD_CHECK(OpenRank(n, r, id, &comm, &s));
    std::vector<float> want;
    for (int k = 0; k < n; ++k) {
      const std::vector<float> v = Values<float>(k, count);
      want.insert(want.end(), v.begin(), v.end());
    }
    float* in = Up(Values<float>(r, count));
    float* out = Up(std::vector<float>(n * count, 0.0f));
    CHILD_NCCL(ncclAllGather(in, out, count, ncclFloat32, comm, s));
    CHILD_NCCL(Await(comm, s));
    CHILD_CHECK(SameBits(Down(out, n * count), want, "out of place"));
    // In place: this rank's input is its block of the output.
    std::vector<float> host(n * count, -1.0f);
    const std::vector<float> v = Values<float>(r, count);
    std::copy(v.begin(), v.end(), host.begin() + r * count);
    float* both = Up(host);
    CHILD_NCCL(ncclAllGather(both + r * count, both, count, ncclFloat32, comm, s));
    CHILD_NCCL(Await(comm, s));
    CHILD_CHECK(SameBits(Down(both, n * count), want, "in place"));
    CHILD_NCCL(ncclCommDestroy(comm));
    return 0;
  }));
}

TEST(NcclEmulatorTest, BroadcastCopiesTheRootsBytesInPlaceAndNot) {
  const int n = 3;
  const ncclUniqueId id = NewId();
  ExpectAllSucceeded(RunRanks(n, [&](int r) {
    ncclComm_t comm = nullptr;
    cudaStream_t s = nullptr;
    CHILD_CHECK(OpenRank(n, r, id, &comm, &s));
    // uint8 in place from rank 2, more than a round.
    const size_t bytes = (size_t{3} << 20) + 17;
    std::vector<uint8_t> root_bytes(bytes), mine(bytes, static_cast<uint8_t>(r));
    for (size_t i = 0; i < bytes; ++i) root_bytes[i] = static_cast<uint8_t>(i * 7 + 3);
    uint8_t* b = Up(r == 2 ? root_bytes : mine);
    CHILD_NCCL(ncclBroadcast(b, b, bytes, ncclUint8, 2, comm, s));
    CHILD_NCCL(Await(comm, s));
    CHILD_CHECK(Down(b, bytes) == root_bytes);
    // float32 out of place from rank 1; only the root's sendbuff is read.
    float* send = r == 1 ? Up(Values<float>(1, 999)) : nullptr;
    float* recv = Up(std::vector<float>(999, 0.0f));
    CHILD_NCCL(ncclBroadcast(send, recv, 999, ncclFloat32, 1, comm, s));
    CHILD_NCCL(Await(comm, s));
    CHILD_CHECK(SameBits(Down(recv, 999), Values<float>(1, 999), "float32 from rank 1"));
    CHILD_NCCL(ncclCommDestroy(comm));
    return 0;
  }));
}

TEST(NcclEmulatorTest, SendAndRecvInOneGroupPassDataAroundARing) {
  const int n = 4;
  const size_t count = 100003;  // more than one mailbox chunk
  const ncclUniqueId id = NewId();
  ExpectAllSucceeded(RunRanks(n, [&](int r) {
    ncclComm_t comm = nullptr;
    cudaStream_t s = nullptr;
    CHILD_CHECK(OpenRank(n, r, id, &comm, &s));
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    float* send = Up(Values<float>(r, count));
    float* recv = Up(std::vector<float>(count, 0.0f));
    // Every rank sends before it receives: only the group keeps this from deadlocking.
    for (int turn = 0; turn < 3; ++turn) {
      CHILD_NCCL(ncclGroupStart());
      CHILD_NCCL(ncclSend(send, count, ncclFloat32, next, comm, s));
      CHILD_NCCL(ncclRecv(recv, count, ncclFloat32, prev, comm, s));
      CHILD_NCCL(ncclGroupEnd());
      CHILD_NCCL(Await(comm, s));
      CHILD_CHECK(SameBits(Down(recv, count), Values<float>(prev, count), "from the previous rank"));
    }
    CHILD_NCCL(ncclCommDestroy(comm));
    return 0;
  }));
}

TEST(NcclEmulatorTest, ASendAndRecvToItselfNeedOneGroup) {
  const ncclUniqueId id = NewId();
  ExpectAllSucceeded(RunRanks(1, [&](int) {
    ncclComm_t comm = nullptr;
    cudaStream_t s = nullptr;
    CHILD_CHECK(OpenRank(1, 0, id, &comm, &s));
    float* a = Up(Values<float>(0, 64));
    float* b = Up(std::vector<float>(64, 0.0f));
    CHILD_EQ(ncclRecv(b, 64, ncclFloat32, 0, comm, s), ncclInvalidUsage);
    CHILD_NCCL(ncclGroupStart());
    CHILD_NCCL(ncclRecv(b, 64, ncclFloat32, 0, comm, s));
    CHILD_NCCL(ncclSend(a, 64, ncclFloat32, 0, comm, s));
    CHILD_NCCL(ncclGroupEnd());
    CHILD_NCCL(Await(comm, s));
    CHILD_CHECK(SameBits(Down(b, 64), Values<float>(0, 64), "to itself"));
    CHILD_NCCL(ncclCommDestroy(comm));
    return 0;
  }));
}

TEST(NcclEmulatorTest, NonBlockingInitReturnsInProgressThenSuccess) {
  const int n = 2;
  const ncclUniqueId id = NewId();
  ExpectAllSucceeded(RunRanks(n, [&](int r) {
    CHILD_CUDA(cudaSetDevice(r));
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0 must wait for it
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    CHILD_EQ(ncclCommInitRankConfig(&comm, n, id, r, &config), ncclInProgress);
    CHILD_CHECK(comm != nullptr);
    ncclResult_t state = ncclInProgress;
    int in_progress = 0;
    const Clock::time_point t0 = Clock::now();
    while (state == ncclInProgress && Since(t0) < 20) {
      CHILD_NCCL(ncclCommGetAsyncError(comm, &state));
      in_progress += state == ncclInProgress;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    CHILD_EQ(state, ncclSuccess);
    // Rank 0 polls for the 300 ms rank 1 sleeps; rank 1 arrives to a waiting peer, and its
    // init may be done before its first poll (CI, 2026-12-07: in_progress 0 on rank 1).
    if (r == 0) CHILD_CHECK(in_progress > 0);
    cudaStream_t s;
    CHILD_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    double* d = Up(std::vector<double>{r + 1.0});
    CHILD_NCCL(ncclAllReduce(d, d, 1, ncclFloat64, ncclSum, comm, s));
    CHILD_NCCL(Await(comm, s));
    CHILD_EQ(Down(d, 1)[0], 3.0);
    // Finalize then destroy, as the project does.
    ncclResult_t f = ncclCommFinalize(comm);
    while (f == ncclInProgress) CHILD_NCCL(ncclCommGetAsyncError(comm, &f));
    CHILD_EQ(f, ncclSuccess);
    CHILD_NCCL(ncclCommDestroy(comm));
    return 0;
  }));
}

TEST(NcclEmulatorTest, TwoRanksOnOneDeviceFailTheInitWithDuplicateGpu) {
  const int n = 2;
  const ncclUniqueId id = NewId();
  ExpectAllSucceeded(RunRanks(n, [&](int r) {
    CHILD_CUDA(cudaSetDevice(1));  // both ranks
    ncclComm_t comm = nullptr;
    if (r == 0) {  // non-blocking: the error comes as the async error
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      CHILD_EQ(ncclCommInitRankConfig(&comm, n, id, r, &config), ncclInProgress);
      ncclResult_t state = ncclInProgress;
      const Clock::time_point t0 = Clock::now();
      while (state == ncclInProgress && Since(t0) < 20) CHILD_NCCL(ncclCommGetAsyncError(comm, &state));
      CHILD_EQ(state, ncclInvalidUsage);
      const std::string message = ncclGetLastError(comm);
      CHILD_CHECK(message.find("Duplicate GPU detected : rank 0 and rank 1 both on CUDA device") != std::string::npos);
      CHILD_NCCL(ncclCommAbort(comm));
    } else {  // blocking: returned
      CHILD_EQ(ncclCommInitRank(&comm, n, id, r), ncclInvalidUsage);
      const std::string message = ncclGetLastError(nullptr);
      CHILD_CHECK(message.find("Duplicate GPU detected : rank 1 and rank 0 both on CUDA device") != std::string::npos);
    }
    return 0;
  }));
  EXPECT_FALSE(SegmentExists(id));
}

TEST(NcclEmulatorTest, InvalidRanksAreInvalidArguments) {
  const ncclUniqueId id = NewId();
  ExpectAllSucceeded(RunRanks(1, [&](int) {
    ncclComm_t comm = nullptr;
    CHILD_EQ(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument);
    CHILD_EQ(ncclCommInitRank(&comm, 2, id, -1), ncclInvalidArgument);
    CHILD_EQ(ncclCommInitRank(&comm, 2, id, 2), ncclInvalidArgument);
    ncclUniqueId garbage{};
    CHILD_EQ(ncclCommInitRank(&comm, 1, garbage, 0), ncclInvalidArgument);
    return 0;
  }));
  EXPECT_FALSE(SegmentExists(id));
}

TEST(NcclEmulatorTest, AnExitedPeerMakesTheAllReduceFailWithinSeconds) {
  const int n = 2;
  const ncclUniqueId id = NewId();
  ExpectAllSucceeded(RunRanks(n, [&](int r) {
    CHILD_CUDA(cudaSetDevice(r));
    ncclComm_t comm = InitBlocking(n, r, id);
    CHILD_CHECK(comm != nullptr);
    if (r == 1) _exit(0);  // gone without a word, before the all-reduce
    cudaStream_t s;
    CHILD_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float* f = Up(std::vector<float>(256, 1.0f));
    const Clock::time_point t0 = Clock::now();
    CHILD_NCCL(ncclAllReduce(f, f, 256, ncclFloat32, ncclSum, comm, s));
    CHILD_EQ(Await(comm, s, 20), ncclRemoteError);
    CHILD_CHECK(Since(t0) < 5);
    CHILD_CHECK(std::string(ncclGetLastError(comm)).find("rank 1") != std::string::npos);
    // The failed operation holds the stream, as NCCL's kernel does, until the abort.
    CHILD_EQ(cudaStreamQuery(s), cudaErrorNotReady);
    CHILD_NCCL(ncclCommAbort(comm));
    CHILD_CHECK(Drains(s, 2));
    return 0;
  }));
}

TEST(NcclEmulatorTest, AbortEndsAPendingOperationWithoutWaitingForItsPeer) {
  const int n = 2;
  const ncclUniqueId id = NewId();
  ExpectAllSucceeded(RunRanks(n, [&](int r) {
    CHILD_CUDA(cudaSetDevice(r));
    ncclComm_t comm = InitBlocking(n, r, id);
    CHILD_CHECK(comm != nullptr);
    if (r == 1) {  // alive, but never joins the all-reduce
      std::this_thread::sleep_for(std::chrono::seconds(2));
      return 0;
    }
    cudaStream_t s;
    CHILD_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float* in = Up(std::vector<float>(256, 1.0f));
    float* out = Up(std::vector<float>(256, -1.0f));
    CHILD_NCCL(ncclAllReduce(in, out, 256, ncclFloat32, ncclSum, comm, s));
    CHILD_EQ(Await(comm, s, 0.3), ncclInProgress);  // pending: no error, not done
    const Clock::time_point t0 = Clock::now();
    CHILD_NCCL(ncclCommAbort(comm));
    CHILD_CHECK(Since(t0) < 0.5);  // abort does not wait
    CHILD_CHECK(Drains(s, 1));
    CHILD_CHECK(Down(out, 256) == std::vector<float>(256, -1.0f));  // never completed
    ncclResult_t state;
    CHILD_EQ(ncclCommGetAsyncError(comm, &state), ncclInvalidArgument);  // the handle is gone
    return 0;
  }));
}

TEST(NcclEmulatorTest, InitWaitingForAMissingRankEndsWithAbortAndLeavesNoSegment) {
  const ncclUniqueId id = NewId();
  ExpectAllSucceeded(RunRanks(1, [&](int) {
    CHILD_CUDA(cudaSetDevice(0));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    CHILD_EQ(ncclCommInitRankConfig(&comm, 2, id, 0, &config), ncclInProgress);  // rank 1 never comes
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ncclResult_t state;
    CHILD_NCCL(ncclCommGetAsyncError(comm, &state));
    CHILD_EQ(state, ncclInProgress);
    CHILD_CHECK(SegmentExists(id));
    CHILD_NCCL(ncclCommAbort(comm));
    CHILD_CHECK(!SegmentExists(id));
    return 0;
  }));
}

// Rank 0 killed (SIGKILL) while it waits for a rank that never joins leaves its segment
// behind (no one is left to remove the name); the next communicator's rank 0 sweeps it.
TEST(NcclEmulatorTest, ASegmentLeftByAKilledRankZeroIsSweptByTheNextInit) {
  const ncclUniqueId stale = NewId();
  const std::vector<int> killed = RunRanks(1, [&](int) {
    CHILD_CUDA(cudaSetDevice(0));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    CHILD_EQ(ncclCommInitRankConfig(&comm, 2, stale, 0, &config), ncclInProgress);  // rank 1 never comes
    for (int i = 0; i < 2000 && !SegmentExists(stale); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // its header written, waiting for rank 1
    raise(SIGKILL);
    return 0;
  });
  ASSERT_EQ(killed, std::vector<int>{128 + SIGKILL});
  ASSERT_TRUE(SegmentExists(stale)) << "the test needs the killed rank's segment";
  const ncclUniqueId id = NewId();
  ExpectAllSucceeded(RunRanks(1, [&](int) {
    CHILD_CUDA(cudaSetDevice(0));
    ncclComm_t comm = InitBlocking(1, 0, id);
    CHILD_CHECK(comm != nullptr);
    CHILD_NCCL(ncclCommDestroy(comm));
    return 0;
  }));
  EXPECT_FALSE(SegmentExists(stale));
}

TEST(NcclEmulatorTest, RanksCallingDifferentCountsAreReportedAndFail) {
  const int n = 2;
  const ncclUniqueId id = NewId();
  ExpectAllSucceeded(RunRanks(n, [&](int r) {
    msemu::ScopedCapture capture;
    ncclComm_t comm = nullptr;
    cudaStream_t s = nullptr;
    CHILD_CHECK(OpenRank(n, r, id, &comm, &s));
    float* f = Up(std::vector<float>(20, 1.0f));
    CHILD_NCCL(ncclAllReduce(f, f, r == 0 ? 10 : 20, ncclFloat32, ncclSum, comm, s));
    CHILD_EQ(Await(comm, s, 10), ncclInvalidUsage);
    CHILD_EQ(capture.reports().size(), size_t{1});
    const std::string& line = capture.reports()[0];
    std::fprintf(stderr, "rank %d reported: %s\n", r, line.c_str());
    CHILD_CHECK(line.find("mismatch") != std::string::npos);
    CHILD_CHECK(line.find("ncclAllReduce(count 10") != std::string::npos);
    CHILD_CHECK(line.find("ncclAllReduce(count 20") != std::string::npos);
    CHILD_NCCL(ncclCommAbort(comm));
    return 0;
  }));
}

TEST(NcclEmulatorTest, AReceiveOfAnotherSizeThanTheSendIsReportedAndFails) {
  const int n = 2;
  const ncclUniqueId id = NewId();
  ExpectAllSucceeded(RunRanks(n, [&](int r) {
    msemu::ScopedCapture capture;
    ncclComm_t comm = nullptr;
    cudaStream_t s = nullptr;
    CHILD_CHECK(OpenRank(n, r, id, &comm, &s));
    float* f = Up(std::vector<float>(100, 1.0f));
    if (r == 0) {
      CHILD_NCCL(ncclSend(f, 100, ncclFloat32, 1, comm, s));
      // The send completes (its chunk is posted) or fails once rank 1 has failed.
      const ncclResult_t e = Await(comm, s, 10);
      CHILD_CHECK(e == ncclSuccess || e == ncclRemoteError);
    } else {
      CHILD_NCCL(ncclRecv(f, 50, ncclFloat32, 0, comm, s));
      CHILD_EQ(Await(comm, s, 10), ncclInvalidUsage);
      CHILD_EQ(capture.reports().size(), size_t{1});
      CHILD_CHECK(capture.reports()[0].find("400 bytes") != std::string::npos);
      CHILD_CHECK(capture.reports()[0].find("200 bytes") != std::string::npos);
    }
    CHILD_NCCL(ncclCommAbort(comm));
    return 0;
  }));
}

TEST(NcclEmulatorTest, BadBuffersAreReportedAndRejected) {
  const ncclUniqueId id = NewId();
  ExpectAllSucceeded(RunRanks(1, [&](int) {
    msemu::ScopedCapture capture;
    ncclComm_t comm = nullptr;
    cudaStream_t s = nullptr;
    CHILD_CHECK(OpenRank(1, 0, id, &comm, &s));
    // Host memory.
    std::vector<float> host(16, 1.0f);
    CHILD_EQ(ncclAllReduce(host.data(), host.data(), 16, ncclFloat32, ncclSum, comm, s), ncclInvalidArgument);
    CHILD_EQ(capture.reports().size(), size_t{1});
    CHILD_CHECK(capture.reports()[0].find("not device memory") != std::string::npos);
    // Past the end of an allocation.
    float* d = Up(std::vector<float>(16, 1.0f));
    CHILD_EQ(ncclAllGather(d, d, 17, ncclFloat32, comm, s), ncclInvalidArgument);
    CHILD_EQ(capture.reports().size(), size_t{2});
    // Memory of another device.
    CHILD_CUDA(cudaSetDevice(1));
    float* other = Up(std::vector<float>(16, 1.0f));
    CHILD_CUDA(cudaSetDevice(0));
    CHILD_EQ(ncclBroadcast(other, other, 16, ncclFloat32, 0, comm, s), ncclInvalidArgument);
    CHILD_EQ(capture.reports().size(), size_t{3});
    CHILD_CHECK(capture.reports()[2].find("device 1") != std::string::npos);
    // An input never written: reported, the operation still runs.
    float* fresh = nullptr;
    CHILD_CUDA(cudaMalloc(reinterpret_cast<void**>(&fresh), 16 * sizeof(float)));
    CHILD_NCCL(ncclAllReduce(fresh, d, 16, ncclFloat32, ncclSum, comm, s));
    CHILD_NCCL(Await(comm, s));
    CHILD_EQ(capture.reports().size(), size_t{4});
    CHILD_CHECK(capture.reports()[3].find("uninitialized") != std::string::npos);
    for (const std::string& line : capture.reports()) std::fprintf(stderr, "reported: %s\n", line.c_str());
    CHILD_NCCL(ncclCommDestroy(comm));
    return 0;
  }));
}

}  // namespace
