#include "parallel/nccl_communicator.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "parallel/fatal.h"

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
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void NcclCommunicator::Fail(const std::string& what, const std::string& reason) {
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

void NcclCommunicator::Complete(ncclResult_t issued, const char* what) {
  const Clock::time_point deadline = Clock::now() + ToDuration(options_.timeout_s);
  const std::string timed_out = absl::StrCat("timed out after ", options_.timeout_s, " s; a peer rank is gone or "
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
    if (Clock::now() > deadline) Fail(what, timed_out);
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void NcclCommunicator::AllReduce(float* data, int64_t count, ReduceOp op) {
  cudaSetDevice(device_);
  Complete(ncclAllReduce(data, data, count, ncclFloat32, ToNccl(op), comm_, stream_), "AllReduce(float)");
}

void NcclCommunicator::AllReduce(double* data, int64_t count, ReduceOp op) {
  cudaSetDevice(device_);
  Complete(ncclAllReduce(data, data, count, ncclFloat64, ToNccl(op), comm_, stream_), "AllReduce(double)");
}

void NcclCommunicator::ReduceScatter(const float* send, float* recv, int64_t count, ReduceOp op) {
  cudaSetDevice(device_);
  Complete(ncclReduceScatter(send, recv, count, ncclFloat32, ToNccl(op), comm_, stream_), "ReduceScatter");
}

void NcclCommunicator::AllGather(const float* send, float* recv, int64_t count) {
  cudaSetDevice(device_);
  Complete(ncclAllGather(send, recv, count, ncclFloat32, comm_, stream_), "AllGather");
}

void NcclCommunicator::Broadcast(void* data, int64_t bytes, int root) {
  cudaSetDevice(device_);
  Complete(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_), "Broadcast");
}

void NcclCommunicator::Send(const float* data, int64_t count, int peer) {
  cudaSetDevice(device_);
  Complete(ncclSend(data, count, ncclFloat32, peer, comm_, stream_), "Send");
}

void NcclCommunicator::Recv(float* data, int64_t count, int peer) {
  cudaSetDevice(device_);
  Complete(ncclRecv(data, count, ncclFloat32, peer, comm_, stream_), "Recv");
}

void NcclCommunicator::SendRecv(const float* send, int64_t send_count, int send_peer, float* recv,
                                int64_t recv_count, int recv_peer) {
  cudaSetDevice(device_);
  // One group: both directions progress together.
  ncclResult_t r = ncclGroupStart();
  if (r == ncclSuccess) r = ncclSend(send, send_count, ncclFloat32, send_peer, comm_, stream_);
  if (r == ncclSuccess || r == ncclInProgress) r = ncclRecv(recv, recv_count, ncclFloat32, recv_peer, comm_, stream_);
  const ncclResult_t end = ncclGroupEnd();
  if (r != ncclSuccess && r != ncclInProgress) Fail("SendRecv", ncclGetErrorString(r));
  Complete(end, "SendRecv");
}

void NcclCommunicator::Barrier() {
  cudaSetDevice(device_);
  Complete(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclFloat32, ncclSum, comm_, stream_), "Barrier");
}

}  // namespace multiscreen
