#include "parallel/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "parallel/fatal.h"
#include "parallel/progress.h"

namespace multiscreen {
namespace {

// Elements per MPI call: MPI counts are int.
constexpr int64_t kChunk = int64_t{1} << 30;

MPI_Op ToMpi(ReduceOp op) { return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX; }

template <typename Fn>
void ForChunks(int64_t count, Fn fn) {
  for (int64_t off = 0; off < count; off += kChunk) fn(off, static_cast<int>(std::min(kChunk, count - off)));
}

void CheckCount(const char* what, int64_t count) {
  if (count < 0 || count > INT_MAX) {
    FatalError(absl::StrCat("MpiCommunicator::", what, ": ", count, " elements per rank is more than one MPI call "
                            "takes (2^31 − 1); split it into buckets"));
  }
}

void CheckPeer(const char* what, int peer, int size) {
  if (peer < 0 || peer >= size) {
    FatalError(absl::StrCat("MpiCommunicator::", what, ": peer ", peer, " outside the group of ", size));
  }
}

using progress::Collective;
using Wait = progress::CollectiveWait;  // what the collective watchdog times

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm) : comm_(comm) {
  MS_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  MS_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MS_MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::Duplicate(MPI_Comm comm) {
  MPI_Comm dup = MPI_COMM_NULL;
  {
    const Wait wait(Collective::kCommSetUp);
    MS_MPI_CHECK(MPI_Comm_dup(comm, &dup));
  }
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(dup));
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::Adopt(MPI_Comm comm) {
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(comm));
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_SELF) {
    MPI_Comm_free(&comm_);
  }
}

void MpiCommunicator::AllReduce(float* data, int64_t count, ReduceOp op) {
  const Wait wait(Collective::kAllReduce);
  ForChunks(count, [&](int64_t off, int n) {
    MS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data + off, n, MPI_FLOAT, ToMpi(op), comm_));
  });
}

void MpiCommunicator::AllReduce(double* data, int64_t count, ReduceOp op) {
  const Wait wait(Collective::kAllReduce);
  ForChunks(count, [&](int64_t off, int n) {
    MS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data + off, n, MPI_DOUBLE, ToMpi(op), comm_));
  });
}

void MpiCommunicator::ReduceScatter(const float* send, float* recv, int64_t count, ReduceOp op) {
  CheckCount("ReduceScatter", count);
  const Wait wait(Collective::kReduceScatter);
  if (recv == send + rank_ * count) {
    // In place: MPI leaves the result at the start of the buffer.
    float* buffer = const_cast<float*>(send);
    MS_MPI_CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, buffer, static_cast<int>(count), MPI_FLOAT, ToMpi(op), comm_));
    if (rank_ != 0) std::memmove(recv, buffer, count * sizeof(float));
    return;
  }
  MS_MPI_CHECK(MPI_Reduce_scatter_block(send, recv, static_cast<int>(count), MPI_FLOAT, ToMpi(op), comm_));
}

void MpiCommunicator::AllGather(const float* send, float* recv, int64_t count) {
  CheckCount("AllGather", count);
  const Wait wait(Collective::kAllGather);
  if (send == recv + rank_ * count) {
    MS_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, static_cast<int>(count), MPI_FLOAT, comm_));
    return;
  }
  MS_MPI_CHECK(MPI_Allgather(send, static_cast<int>(count), MPI_FLOAT, recv, static_cast<int>(count), MPI_FLOAT, comm_));
}

void MpiCommunicator::Broadcast(void* data, int64_t bytes, int root) {
  CheckPeer("Broadcast", root, size_);
  const Wait wait(Collective::kBroadcast);
  char* p = static_cast<char*>(data);
  ForChunks(bytes, [&](int64_t off, int n) { MS_MPI_CHECK(MPI_Bcast(p + off, n, MPI_BYTE, root, comm_)); });
}

void MpiCommunicator::Send(const float* data, int64_t count, int peer) {
  CheckPeer("Send", peer, size_);
  const Wait wait(Collective::kSend);
  ForChunks(count, [&](int64_t off, int n) { MS_MPI_CHECK(MPI_Send(data + off, n, MPI_FLOAT, peer, 0, comm_)); });
}

void MpiCommunicator::Recv(float* data, int64_t count, int peer) {
  CheckPeer("Recv", peer, size_);
  const Wait wait(Collective::kRecv);
  ForChunks(count, [&](int64_t off, int n) {
    MS_MPI_CHECK(MPI_Recv(data + off, n, MPI_FLOAT, peer, 0, comm_, MPI_STATUS_IGNORE));
  });
}

void MpiCommunicator::SendRecv(const float* send, int64_t send_count, int send_peer, float* recv,
                               int64_t recv_count, int recv_peer) {
  CheckPeer("SendRecv", send_peer, size_);
  CheckPeer("SendRecv", recv_peer, size_);
  const Wait wait(Collective::kSendRecv);
  // Every chunk posted non-blocking, then one wait: no ordering between the two
  // directions can deadlock, whatever the sizes.
  std::vector<MPI_Request> requests;
  ForChunks(recv_count, [&](int64_t off, int n) {
    requests.emplace_back();
    MS_MPI_CHECK(MPI_Irecv(recv + off, n, MPI_FLOAT, recv_peer, 0, comm_, &requests.back()));
  });
  ForChunks(send_count, [&](int64_t off, int n) {
    requests.emplace_back();
    MS_MPI_CHECK(MPI_Isend(send + off, n, MPI_FLOAT, send_peer, 0, comm_, &requests.back()));
  });
  MS_MPI_CHECK(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
}

void MpiCommunicator::Barrier() {
  const Wait wait(Collective::kBarrier);
  MS_MPI_CHECK(MPI_Barrier(comm_));
}

}  // namespace multiscreen
