#include "parallel/staged_communicator.h"

#include "parallel/fatal.h"

namespace multiscreen {

StagedCommunicator::StagedCommunicator(std::unique_ptr<Communicator> host, kernels::KernelTable<float>* ops)
    : host_(std::move(host)), ops_(ops) {
  if (host_ == nullptr || ops_ == nullptr) FatalError("StagedCommunicator: a host communicator and a kernel table");
  if (host_->device() != Device::kCpu) {
    FatalError("StagedCommunicator: the inner communicator must move host memory, not " +
               DeviceName(host_->device()));
  }
}

float* StagedCommunicator::Host(int64_t count, std::vector<float>* host) {
  if (static_cast<int64_t>(host->size()) < count) host->resize(count);
  return host->data();
}

float* StagedCommunicator::Down(const float* device, int64_t count, std::vector<float>* host) {
  float* h = Host(count, host);
  if (count > 0) ops_->Download(device, count, h);
  staged_ += count;
  return h;
}

void StagedCommunicator::Up(const float* host, int64_t count, float* device) {
  if (count > 0) ops_->Upload(host, count, device);
  staged_ += count;
}

void StagedCommunicator::AllReduce(float* data, int64_t count, ReduceOp op) {
  float* h = Down(data, count, &a_);
  host_->AllReduce(h, count, op);
  Up(h, count, data);
}

void StagedCommunicator::ReduceScatter(const float* send, float* recv, int64_t count, ReduceOp op) {
  // The whole send buffer down, reduced in place on the host (block rank()), that block up.
  float* h = Down(send, size() * count, &a_);
  float* mine = h + rank() * count;
  host_->ReduceScatter(h, mine, count, op);
  Up(mine, count, recv);
}

void StagedCommunicator::AllGather(const float* send, float* recv, int64_t count) {
  // This rank's block down into its place, gathered in place on the host, all up.
  float* h = Host(size() * count, &a_);
  float* mine = h + rank() * count;
  if (count > 0) ops_->Download(send, count, mine);
  staged_ += count;
  host_->AllGather(mine, h, count);
  Up(h, size() * count, recv);
}

void StagedCommunicator::Broadcast(float* data, int64_t count, int root) {
  // Only the root's values matter; the others receive into the scratch.
  float* h = rank() == root ? Down(data, count, &a_) : Host(count, &a_);
  host_->Broadcast(h, count, root);
  if (rank() != root) Up(h, count, data);
}

void StagedCommunicator::Send(const float* data, int64_t count, int peer) {
  host_->Send(Down(data, count, &a_), count, peer);
}

void StagedCommunicator::Recv(float* data, int64_t count, int peer) {
  float* h = Host(count, &a_);
  host_->Recv(h, count, peer);
  Up(h, count, data);
}

void StagedCommunicator::SendRecv(const float* send, int64_t send_count, int send_peer, float* recv,
                                  int64_t recv_count, int recv_peer) {
  float* out = Down(send, send_count, &a_);
  float* in = Host(recv_count, &b_);
  host_->SendRecv(out, send_count, send_peer, in, recv_count, recv_peer);
  Up(in, recv_count, recv);
}

}  // namespace multiscreen
