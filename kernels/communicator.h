// The collective-communication interface the model, the pipeline and the trainer
// use, independent of the transport (here, below model/, so that the model depends
// only on kernels/ and its interfaces; parallel/ implements it): MpiCommunicator (host
// buffers, parallel/mpi_communicator.h), NcclCommunicator (CUDA buffers,
// parallel/nccl_communicator.h), StagedCommunicator (device buffers over a host
// communicator, parallel/staged_communicator.h) and SingleProcessCommunicator, the
// group of one.
//
// Which memory a call reads and writes (DESIGN "Devices"; issue 15):
// - The float calls — AllReduce(float*), ReduceScatter, AllGather, Broadcast(float*),
//   Send, Recv, SendRecv — move tensors: activations, gradients, parameters. Their
//   buffers live on device() (the step's device: host memory for MPI, the rank's GPU
//   for NCCL and for a staged communicator on a GPU).
// - The double calls (AllReduce(double*)) and Broadcast(void*, bytes) (and its double
//   wrapper) move HOST memory on every implementation: scalars (a loss, a flag, a
//   norm), bootstrap data (an ncclUniqueId, a status) and the vocabulary-parallel
//   head's per-row statistics (row max, rescaled sums, target logits: O(rows) doubles,
//   which the kernel table returns in host memory). A device communicator stages them
//   through a small device scratch of its own (NcclCommunicator); the others reduce
//   them where they are. So the model's calls are the same whichever kind serves it.
//
// Every call is complete when it returns (the buffers may be reused; on a GPU, every
// op issued before the call on the step's stream is finished before the transfer
// reads its buffer). A failure inside a call (a transport error, a timeout) is fatal
// for the whole job: the implementation prints the rank and the reason and aborts
// every process (parallel/fatal.h), since one rank returning an error while its peers
// wait in the same collective would hang the job.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

#include "kernels/buffer.h"

namespace multiscreen {

enum class ReduceOp { kSum, kMax };

// A group of ranks. Float buffers are on device(), double ones and Broadcast(void*)'s
// in host memory (above). Every rank of the group must make the same calls in the same
// order (point-to-point calls: in matching order per pair of ranks).
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Where the float calls' buffers live.
  virtual Device device() const = 0;

  // In place over `count` elements; every rank gets the reduction. float: device();
  // double: host memory.
  virtual void AllReduce(float* data, int64_t count, ReduceOp op) = 0;
  virtual void AllReduce(double* data, int64_t count, ReduceOp op) = 0;

  // send [size()·count] → recv [count]: rank r gets the reduction of every
  // rank's block r. In place when recv == send + rank()·count; the rest of
  // send is then undefined afterwards.
  virtual void ReduceScatter(const float* send, float* recv, int64_t count, ReduceOp op) = 0;

  // send [count] → recv [size()·count]: block r is rank r's send. In place
  // when send == recv + rank()·count.
  virtual void AllGather(const float* send, float* recv, int64_t count) = 0;

  // `bytes` bytes of host memory from rank `root` to every rank (e.g. an
  // ncclUniqueId, a status message, a step number).
  virtual void Broadcast(void* data, int64_t bytes, int root) = 0;
  void Broadcast(double* data, int64_t count, int root) { Broadcast(static_cast<void*>(data), count * 8, root); }
  // `count` floats on device() from rank `root` to every rank (replicated gradients).
  virtual void Broadcast(float* data, int64_t count, int root) = 0;

  // Point to point (pipeline activations): blocking; messages between one pair
  // of ranks arrive in the order sent. Counts must match on both sides.
  virtual void Send(const float* data, int64_t count, int peer) = 0;
  virtual void Recv(float* data, int64_t count, int peer) = 0;
  // Send to send_peer and receive from recv_peer at once (MPI_Sendrecv): the
  // exchange the 1F1B schedule needs to stay deadlock-free.
  virtual void SendRecv(const float* send, int64_t send_count, int send_peer, float* recv, int64_t recv_count,
                        int recv_peer) = 0;

  virtual void Barrier() = 0;
};

// The group of one rank: reductions and broadcasts are the identity, gathers and
// scatters copies, and a Send to itself is queued for the next Recv. Its float buffers
// are on `device`; on a device other than the CPU it copies nothing (it has no kernel
// table): in-place ReduceScatter/AllGather are fine, and a call that would have to copy
// between two device buffers (another ReduceScatter/AllGather, Send/Recv to itself)
// is fatal — no step makes one, since a pipeline or dp group of one never sends.
class SingleProcessCommunicator final : public Communicator {
 public:
  explicit SingleProcessCommunicator(Device device = Device::kCpu) : device_(device) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Device device() const override { return device_; }
  void AllReduce(float*, int64_t, ReduceOp) override {}
  void AllReduce(double*, int64_t, ReduceOp) override {}
  void ReduceScatter(const float* send, float* recv, int64_t count, ReduceOp) override { Copy(send, recv, count); }
  void AllGather(const float* send, float* recv, int64_t count) override { Copy(send, recv, count); }
  void Broadcast(void*, int64_t, int root) override { CheckPeer(root); }
  void Broadcast(float*, int64_t, int root) override { CheckPeer(root); }
  using Communicator::Broadcast;
  void Send(const float* data, int64_t count, int peer) override {
    CheckPeer(peer);
    if (device_ != Device::kCpu) Die("SingleProcessCommunicator: Send to itself on a device buffer");
    queue_.emplace_back(data, data + count);
  }
  void Recv(float* data, int64_t count, int peer) override {
    CheckPeer(peer);
    if (queue_.empty() || static_cast<int64_t>(queue_.front().size()) != count) {
      Die("SingleProcessCommunicator: Recv without a matching Send of the same count");
    }
    std::memcpy(data, queue_.front().data(), count * sizeof(float));
    queue_.pop_front();
  }
  void SendRecv(const float* send, int64_t send_count, int send_peer, float* recv, int64_t recv_count,
                int recv_peer) override {
    Send(send, send_count, send_peer);
    Recv(recv, recv_count, recv_peer);
  }
  void Barrier() override {}

 private:
  void Copy(const float* from, float* to, int64_t count) const {
    if (from == to || count <= 0) return;
    if (device_ != Device::kCpu) Die("SingleProcessCommunicator: a copy between two device buffers");
    std::memmove(to, from, count * sizeof(float));
  }
  static void CheckPeer(int peer) {
    if (peer != 0) Die("SingleProcessCommunicator: peer/root must be 0 in a group of one");
  }
  [[noreturn]] static void Die(const char* reason) {
    std::fprintf(stderr, "multiscreen: fatal: %s\n", reason);
    std::fflush(stderr);
    std::abort();
  }
  Device device_;
  std::deque<std::vector<float>> queue_;
};

}  // namespace multiscreen
