// Communicator over an MPI communicator, for host (CPU) buffers. Every MPI
// call goes through MS_MPI_CHECK: an error ends the job with the rank and the
// reason. Counts past 2^30 elements are split into several MPI calls.
#pragma once

#include <memory>

#include <mpi.h>

#include "kernels/communicator.h"

namespace multiscreen {

class MpiCommunicator final : public Communicator {
 public:
  // A communicator over a duplicate of `comm` (so that its traffic cannot mix
  // with anyone else's), with MPI_ERRORS_RETURN set.
  static std::unique_ptr<MpiCommunicator> Duplicate(MPI_Comm comm);
  // Takes ownership of `comm` (freed by the destructor).
  static std::unique_ptr<MpiCommunicator> Adopt(MPI_Comm comm);
  ~MpiCommunicator() override;

  MPI_Comm comm() const { return comm_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::kCpu; }

  void AllReduce(float* data, int64_t count, ReduceOp op) override;
  void AllReduce(double* data, int64_t count, ReduceOp op) override;
  void ReduceScatter(const float* send, float* recv, int64_t count, ReduceOp op) override;
  void AllGather(const float* send, float* recv, int64_t count) override;
  void Broadcast(void* data, int64_t bytes, int root) override;
  void Broadcast(float* data, int64_t count, int root) override { Broadcast(static_cast<void*>(data), count * 4, root); }
  using Communicator::Broadcast;
  void Send(const float* data, int64_t count, int peer) override;
  void Recv(float* data, int64_t count, int peer) override;
  void SendRecv(const float* send, int64_t send_count, int send_peer, float* recv, int64_t recv_count,
                int recv_peer) override;
  void Barrier() override;

 private:
  explicit MpiCommunicator(MPI_Comm comm);
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

}  // namespace multiscreen
