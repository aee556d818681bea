// The collective-communication interface the model and trainer use, independent
// of the transport. MPI (CPU buffers) and NCCL (GPU buffers) implementations
// come with the parallel work; SingleProcessCommunicator is the group of one.
#pragma once

#include <cstdint>

namespace multiscreen {

enum class ReduceOp { kSum, kMax };

// A group of ranks. Buffers are on the device the implementation serves.
// Every rank of the group must make the same calls in the same order.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place over `count` elements.
  virtual void AllReduce(float* data, int64_t count, ReduceOp op) = 0;
  virtual void AllReduce(double* data, int64_t count, ReduceOp op) = 0;
};

// The group of one rank: every collective is the identity.
class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void AllReduce(float*, int64_t, ReduceOp) override {}
  void AllReduce(double*, int64_t, ReduceOp) override {}
};

}  // namespace multiscreen
