// A communicator on device buffers over a host communicator (issue 15's "staged MPI
// path"): each float call downloads its device buffer into host scratch, makes the
// inner (MPI) call there, and uploads the result, through the step device's kernel
// table (kernels/kernel_table.h: Download waits for the ops issued before it). For
// ranks that share a GPU, or a build without NCCL, so that every tp × pp × dp layout
// runs on one GPU; on the CPU table Upload/Download are copies, which is how the CPU
// tests run this orchestration (tests/parallel/parallel_step_test.cc --staged).
//
// The double calls and Broadcast(void*) are host memory (kernels/communicator.h) and go
// straight to the inner communicator. Failures are the inner communicator's (fatal for
// the job) and the table's (fatal, one line). Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/communicator.h"
#include "kernels/kernel_table.h"

namespace multiscreen {

class StagedCommunicator final : public Communicator {
 public:
  // `host`: the transport (device() must be kCpu); `ops`: the step device's table
  // (outlives this communicator). Neither may be null.
  StagedCommunicator(std::unique_ptr<Communicator> host, kernels::KernelTable<float>* ops);

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  Device device() const override { return ops_->device(); }
  // The host transport (e.g. for ProcessGrid::DuplicateDp to duplicate it).
  Communicator& host() { return *host_; }
  kernels::KernelTable<float>* ops() const { return ops_; }
  // Floats moved through the host so far (downloaded plus uploaded), for tests and logs.
  int64_t staged_floats() const { return staged_; }

  void AllReduce(float* data, int64_t count, ReduceOp op) override;
  void AllReduce(double* data, int64_t count, ReduceOp op) override { host_->AllReduce(data, count, op); }
  void ReduceScatter(const float* send, float* recv, int64_t count, ReduceOp op) override;
  void AllGather(const float* send, float* recv, int64_t count) override;
  void Broadcast(void* data, int64_t bytes, int root) override { host_->Broadcast(data, bytes, root); }
  void Broadcast(float* data, int64_t count, int root) override;
  using Communicator::Broadcast;
  void Send(const float* data, int64_t count, int peer) override;
  void Recv(float* data, int64_t count, int peer) override;
  void SendRecv(const float* send, int64_t send_count, int send_peer, float* recv, int64_t recv_count,
                int recv_peer) override;
  void Barrier() override { host_->Barrier(); }

 private:
  // `host` grown to count floats; its data.
  static float* Host(int64_t count, std::vector<float>* host);
  // count floats of device memory into *host (grown as needed); its data.
  float* Down(const float* device, int64_t count, std::vector<float>* host);
  void Up(const float* host, int64_t count, float* device);

  std::unique_ptr<Communicator> host_;
  kernels::KernelTable<float>* ops_;
  std::vector<float> a_, b_;  // host scratch (SendRecv needs two)
  int64_t staged_ = 0;
};

}  // namespace multiscreen
