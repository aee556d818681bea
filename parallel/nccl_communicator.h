// Communicator over NCCL for device (CUDA) buffers, one GPU per rank. The
// ncclUniqueId goes from rank 0 to the others through a host bootstrap
// communicator (MPI in a job; SingleProcessCommunicator for a group of one).
//
// Float buffers are CUDA memory on this rank's GPU; the double reductions and
// Broadcast(void*) take host memory (kernels/communicator.h), staged through a
// small device scratch of this communicator's. Every operation first waits for
// the work issued before it on the step's stream (the table stream of
// kernels/cuda/table_stream.h, which every kernel table uses: an event recorded
// there; it is blocking, so legacy-stream work before it is covered), runs on this
// communicator's own stream, and is complete when it returns. It waits by polling the stream and ncclCommGetAsyncError; an NCCL
// error or an operation outlasting the timeout (a peer that died or diverged)
// aborts the communicator (ncclCommAbort) and then the job (FatalError), with
// the rank, the operation and the reason, instead of hanging.
// Built only with CUDA and NCCL (CMake target ms_parallel_nccl).
#pragma once

#include <memory>
#include <string>

#include <cuda_runtime.h>
#include <nccl.h>

#include "absl/status/statusor.h"
#include "kernels/communicator.h"
#include "parallel/progress.h"

namespace multiscreen {

struct NcclOptions {
  double timeout_s = 600;  // longest wait for one operation (and for initialization)
};

class NcclCommunicator final : public Communicator {
 public:
  // Collective over the ranks of `bootstrap` (same rank numbers). `cuda_device`:
  // this rank's GPU, usually ProcessGrid::local_rank(). Errors: a CUDA or NCCL
  // failure (naming the call), or initialization outlasting the timeout.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(Communicator& bootstrap, int cuda_device,
                                                                  NcclOptions options = {});
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::kCuda; }
  int cuda_device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

  // As Communicator: float pointers are device memory on cuda_device(); double and
  // void* ones host memory.
  void AllReduce(float* data, int64_t count, ReduceOp op) override;
  void AllReduce(double* data, int64_t count, ReduceOp op) override;
  void ReduceScatter(const float* send, float* recv, int64_t count, ReduceOp op) override;
  void AllGather(const float* send, float* recv, int64_t count) override;
  void Broadcast(void* data, int64_t bytes, int root) override;
  void Broadcast(float* data, int64_t count, int root) override;
  using Communicator::Broadcast;
  void Send(const float* data, int64_t count, int peer) override;
  void Recv(float* data, int64_t count, int peer) override;
  void SendRecv(const float* send, int64_t send_count, int send_peer, float* recv, int64_t recv_count,
                int recv_peer) override;
  void Barrier() override;

 private:
  NcclCommunicator() = default;
  // Before issuing: this stream waits for the step's stream (ops issued so far).
  void Begin(const char* what);
  // After issuing `what` (NCCL's return `issued`, an `op` for the collective watchdog):
  // waits until NCCL accepted it and the stream drained, or aborts the communicator and
  // the job (an NCCL error, the watchdog's verdict, or this operation's own timeout).
  void Complete(ncclResult_t issued, const char* what, progress::Collective op);
  // A device scratch of at least `bytes` bytes (for the host-memory calls).
  void* Scratch(size_t bytes, const char* what);
  [[noreturn]] void Fail(const std::string& what, const std::string& reason);

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  float* barrier_word_ = nullptr;  // one device float for Barrier
  cudaEvent_t step_done_ = nullptr;  // recorded on the step's stream by Begin
  void* scratch_ = nullptr;          // host-memory calls staged here
  size_t scratch_bytes_ = 0;
  int rank_ = 0, size_ = 1, device_ = 0;
  NcclOptions options_;
};

}  // namespace multiscreen
