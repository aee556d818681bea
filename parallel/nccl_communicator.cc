#include "parallel/nccl_communicator.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/table_stream.h"
#include "parallel/fatal.h"
#include "parallel/progress.h"

namespace multiscreen {
namespace {

using Clock = std::chrono::steady_clock;

ncclRedOp_t ToNccl(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }

// Waits while a non-blocking communicator still works on the last call: the
// call's final result, or ncclInProgress past `deadline`.
ncclResult_t AwaitAccepted(ncclComm_t comm, ncclResult_t issued, Clock::time_point deadline) {
  ncclResult_t state = issued;
  while (state == ncclInProgress) {
    if (Clock::now() > deadline) return ncclInProgress;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclSystemError;
  }
  return state;
}

std::chrono::nanoseconds ToDuration(double seconds) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(seconds));
}

}  // namespace

// The one check of NCCL and CUDA return codes during initialization: returns a
// Status naming the call.
#define MS_NCCL_INIT_CHECK(call, ok_value, error_string)                                           \
  do {                                                                                            \
    const auto ms_rc_ = (call);                                                                   \
    if (ms_rc_ != ok_value) return absl::InternalError(absl::StrCat(#call, ": ", error_string(ms_rc_))); \
  } while (0)

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(Communicator& bootstrap, int cuda_device,
                                                                          NcclOptions options) {
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  c->rank_ = bootstrap.rank();
  c->size_ = bootstrap.size();
  c->device_ = cuda_device;
  c->options_ = options;
  ncclUniqueId id{};
  if (c->rank_ == 0) MS_NCCL_INIT_CHECK(ncclGetUniqueId(&id), ncclSuccess, ncclGetErrorString);
  bootstrap.Broadcast(&id, sizeof(id), 0);
  MS_NCCL_INIT_CHECK(cudaSetDevice(cuda_device), cudaSuccess, cudaGetErrorString);
  MS_NCCL_INIT_CHECK(cudaStreamCreateWithFlags(&c->stream_, cudaStreamNonBlocking), cudaSuccess, cudaGetErrorString);
  MS_NCCL_INIT_CHECK(cudaMalloc(&c->barrier_word_, sizeof(float)), cudaSuccess, cudaGetErrorString);
  // Barrier all-reduces this word: NCCL reads it, so it must hold a value (the emulated
  // device's initcheck found it never written).
  MS_NCCL_INIT_CHECK(cudaMemset(c->barrier_word_, 0, sizeof(float)), cudaSuccess, cudaGetErrorString);
  MS_NCCL_INIT_CHECK(cudaEventCreateWithFlags(&c->step_done_, cudaEventDisableTiming), cudaSuccess,
                     cudaGetErrorString);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a stuck initialization or operation can be timed out and aborted
  const ncclResult_t issued = ncclCommInitRankConfig(&c->comm_, c->size_, id, c->rank_, &config);
  if (issued != ncclSuccess && issued != ncclInProgress) {
    return absl::InternalError(absl::StrCat("ncclCommInitRankConfig: ", ncclGetErrorString(issued)));
  }
  const ncclResult_t state = AwaitAccepted(c->comm_, issued, Clock::now() + ToDuration(options.timeout_s));
  if (state != ncclSuccess) {
    const std::string reason = state == ncclInProgress ? absl::StrCat("timed out after ", options.timeout_s, " s")
                                                       : std::string(ncclGetErrorString(state));
    ncclCommAbort(c->comm_);
    c->comm_ = nullptr;
    return absl::DeadlineExceededError(absl::StrCat("ncclCommInitRankConfig on rank ", c->rank_, " of ", c->size_,
                                                    " (GPU ", cuda_device, "): ", reason));
  }
  return c;
}

#undef MS_NCCL_INIT_CHECK

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr) {
    const ncclResult_t issued = ncclCommFinalize(comm_);
    if (AwaitAccepted(comm_, issued, Clock::now() + ToDuration(options_.timeout_s)) == ncclSuccess) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }
  if (barrier_word_ != nullptr) cudaFree(barrier_word_);
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (step_done_ != nullptr) cudaEventDestroy(step_done_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void NcclCommunicator::Fail(const std::string& what, const std::string& reason) {
  // A peer that died: NCCL says only "remote process exited". The peer watchdog
  // (parallel/peer_watchdog.h) names the rank and why, within its poll interval: give it
  // that long to end the job with the better line (FatalError prints one line a process).
  if (reason == ncclGetErrorString(ncclRemoteError)) std::this_thread::sleep_for(std::chrono::seconds(2));
  // ncclCommAbort frees the communicator and stops its kernels, but it can
  // itself wait for work stuck on the stream: give it a few seconds on the
  // side, then end the job regardless (process exit releases the GPU).
  if (comm_ != nullptr) {
    auto done = std::make_shared<std::atomic<bool>>(false);
    std::thread([comm = comm_, done] {
      ncclCommAbort(comm);
      done->store(true);
    }).detach();
    const Clock::time_point give_up = Clock::now() + std::chrono::seconds(5);
    while (!done->load() && Clock::now() < give_up) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    comm_ = nullptr;
  }
  FatalError(absl::StrCat("NCCL ", what, " (rank ", rank_, " of ", size_, ", GPU ", device_, "): ", reason));
}

void NcclCommunicator::Complete(ncclResult_t issued, const char* what, progress::Collective op) {
  // Timed by the collective watchdog, whose verdict (naming the rank that did not arrive)
  // is taken below; this operation's own timeout stays above the watchdog's limit.
  const progress::CollectiveWait wait(op, /*takes_verdict=*/true);
  const double timeout_s = progress::WatchdogLimit() > 0 ? progress::WatchdogLimit() + 60 : options_.timeout_s;
  const Clock::time_point deadline = Clock::now() + ToDuration(timeout_s);
  const std::string timed_out = absl::StrCat("timed out after ", timeout_s, " s; a peer rank is gone or "
                                             "called a different operation");
  const ncclResult_t accepted = AwaitAccepted(comm_, issued, deadline);
  if (accepted == ncclInProgress) Fail(what, timed_out);
  if (accepted != ncclSuccess) Fail(what, ncclGetErrorString(accepted));
  for (;;) {
    const cudaError_t q = cudaStreamQuery(stream_);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) Fail(what, cudaGetErrorString(q));
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &async) != ncclSuccess) Fail(what, "ncclCommGetAsyncError failed");
    if (async != ncclSuccess && async != ncclInProgress) Fail(what, ncclGetErrorString(async));
    if (const std::string* verdict = progress::TakeVerdict(); verdict != nullptr) Fail(what, *verdict);
    if (Clock::now() > deadline) Fail(what, timed_out);
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void NcclCommunicator::Begin(const char* what) {
  if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess) Fail(what, cudaGetErrorString(e));
  // The kernel tables issue on the table stream (kernels/cuda/table_stream.h); this
  // stream is non-blocking, so it waits for their work explicitly.
  if (cudaError_t e = cudaEventRecord(step_done_, kernels::cuda::TableStream()); e != cudaSuccess) {
    Fail(what, cudaGetErrorString(e));
  }
  if (cudaError_t e = cudaStreamWaitEvent(stream_, step_done_, 0); e != cudaSuccess) {
    Fail(what, cudaGetErrorString(e));
  }
}

void* NcclCommunicator::Scratch(size_t bytes, const char* what) {
  if (bytes > scratch_bytes_) {
    if (scratch_ != nullptr) cudaFree(scratch_);
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    if (cudaError_t e = cudaMalloc(&scratch_, bytes); e != cudaSuccess) Fail(what, cudaGetErrorString(e));
    scratch_bytes_ = bytes;
  }
  return scratch_;
}

void NcclCommunicator::AllReduce(float* data, int64_t count, ReduceOp op) {
  Begin("AllReduce(float)");
  Complete(ncclAllReduce(data, data, count, ncclFloat32, ToNccl(op), comm_, stream_), "AllReduce(float)",
           progress::Collective::kAllReduce);
}

void NcclCommunicator::AllReduce(double* data, int64_t count, ReduceOp op) {
  // Host memory (scalars, the head's per-row statistics): through the scratch.
  const char* what = "AllReduce(double)";
  Begin(what);
  const size_t bytes = static_cast<size_t>(count) * sizeof(double);
  double* d = static_cast<double*>(Scratch(bytes, what));
  if (cudaError_t e = cudaMemcpyAsync(d, data, bytes, cudaMemcpyHostToDevice, stream_); e != cudaSuccess) {
    Fail(what, cudaGetErrorString(e));
  }
  Complete(ncclAllReduce(d, d, count, ncclFloat64, ToNccl(op), comm_, stream_), what, progress::Collective::kAllReduce);
  if (cudaError_t e = cudaMemcpy(data, d, bytes, cudaMemcpyDeviceToHost); e != cudaSuccess) {
    Fail(what, cudaGetErrorString(e));
  }
}

void NcclCommunicator::ReduceScatter(const float* send, float* recv, int64_t count, ReduceOp op) {
  Begin("ReduceScatter");
  Complete(ncclReduceScatter(send, recv, count, ncclFloat32, ToNccl(op), comm_, stream_), "ReduceScatter",
           progress::Collective::kReduceScatter);
}

void NcclCommunicator::AllGather(const float* send, float* recv, int64_t count) {
  Begin("AllGather");
  Complete(ncclAllGather(send, recv, count, ncclFloat32, comm_, stream_), "AllGather", progress::Collective::kAllGather);
}

void NcclCommunicator::Broadcast(void* data, int64_t bytes, int root) {
  // Host memory: through the scratch.
  const char* what = "Broadcast(host)";
  Begin(what);
  void* d = Scratch(static_cast<size_t>(bytes), what);
  if (cudaError_t e = cudaMemcpyAsync(d, data, bytes, cudaMemcpyHostToDevice, stream_); e != cudaSuccess) {
    Fail(what, cudaGetErrorString(e));
  }
  Complete(ncclBroadcast(d, d, bytes, ncclUint8, root, comm_, stream_), what, progress::Collective::kBroadcast);
  if (cudaError_t e = cudaMemcpy(data, d, bytes, cudaMemcpyDeviceToHost); e != cudaSuccess) {
    Fail(what, cudaGetErrorString(e));
  }
}

void NcclCommunicator::Broadcast(float* data, int64_t count, int root) {
  Begin("Broadcast");
  Complete(ncclBroadcast(data, data, count, ncclFloat32, root, comm_, stream_), "Broadcast",
           progress::Collective::kBroadcast);
}

void NcclCommunicator::Send(const float* data, int64_t count, int peer) {
  Begin("Send");
  Complete(ncclSend(data, count, ncclFloat32, peer, comm_, stream_), "Send", progress::Collective::kSend);
}

void NcclCommunicator::Recv(float* data, int64_t count, int peer) {
  Begin("Recv");
  Complete(ncclRecv(data, count, ncclFloat32, peer, comm_, stream_), "Recv", progress::Collective::kRecv);
}

void NcclCommunicator::SendRecv(const float* send, int64_t send_count, int send_peer, float* recv,
                                int64_t recv_count, int recv_peer) {
  Begin("SendRecv");
  // One group (ncclGroupStart/End): both directions progress together, so that two
  // neighbouring stages exchanging at once cannot deadlock (1F1B's steady state).
  ncclResult_t r = ncclGroupStart();
  if (r == ncclSuccess) r = ncclSend(send, send_count, ncclFloat32, send_peer, comm_, stream_);
  if (r == ncclSuccess || r == ncclInProgress) r = ncclRecv(recv, recv_count, ncclFloat32, recv_peer, comm_, stream_);
  const ncclResult_t end = ncclGroupEnd();
  if (r != ncclSuccess && r != ncclInProgress) Fail("SendRecv", ncclGetErrorString(r));
  Complete(end, "SendRecv", progress::Collective::kSendRecv);
}

void NcclCommunicator::Barrier() {
  Begin("Barrier");
  Complete(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclFloat32, ncclSum, comm_, stream_), "Barrier",
           progress::Collective::kBarrier);
}

}  // namespace multiscreen
