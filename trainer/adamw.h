// AdamW as PyTorch defines it (torch.optim.AdamW, single-tensor path):
// decoupled weight decay p ← p·(1 − lr·λ), moments m, v with bias correction,
// p ← p − (lr / (1 − β1^t)) · m / (√v / √(1 − β2^t) + ε). fp32 master weights
// and moments. Holds the state of one contiguous range of the flat parameter
// buffer, so ZeRO-1 can give each data-parallel rank its own shard.
//
// The moments and the decay mask live on the device of a kernel table (the step's:
// DESIGN "Devices"), and Step runs the table's fused AdamW there: on the CPU table
// it is kernels/cpu/adamw.h, the same code and order as before the state moved.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/device_array.h"
#include "kernels/kernel_table.h"

namespace multiscreen {

struct AdamWHyper {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;  // λ (paper: 0)
};

// The kernel table's arguments for update number `step` at learning rate lr; decay: the
// mask on the kernel's device (null: decay everywhere).
kernels::AdamWArgs MakeAdamWArgs(const AdamWHyper& hyper, double lr, int64_t step, const uint8_t* decay);

class AdamW {
 public:
  // `size` elements; decay[i] != 0 where weight decay applies (may be empty: all decay).
  // `ops`: the table whose device holds params, grads and the moments (outlives this);
  // null: the CPU's, owned here. Moments start at zero.
  AdamW(int64_t size, AdamWHyper hyper, std::vector<uint8_t> decay = {},
        kernels::KernelTable<float>* ops = nullptr);

  // One update of params[0, size) from grads[0, size) (both on device()) at learning
  // rate lr.
  void Step(float* params, const float* grads, double lr);

  Device device() const { return ops_->device(); }
  int64_t step() const { return step_; }
  int64_t size() const { return m_.size(); }
  // The moments [size] on device(): read and written only at the named points
  // (checkpoint save: CopyToHost; resume: CopyFromHost).
  DeviceArray<float>& m() { return m_; }
  DeviceArray<float>& v() { return v_; }
  const DeviceArray<float>& m() const { return m_; }
  const DeviceArray<float>& v() const { return v_; }
  void set_step(int64_t step) { step_ = step; }

 private:
  AdamWHyper hyper_;
  std::unique_ptr<kernels::KernelTable<float>> own_ops_;  // when none was given
  kernels::KernelTable<float>* ops_;
  DeviceArray<uint8_t> decay_;  // empty: decay everywhere
  DeviceArray<float> m_, v_;
  int64_t step_ = 0;
};

}  // namespace multiscreen
