// AdamW as PyTorch defines it (torch.optim.AdamW, single-tensor path):
// decoupled weight decay p ← p·(1 − lr·λ), moments m, v with bias correction,
// p ← p − (lr / (1 − β1^t)) · m / (√v / √(1 − β2^t) + ε). fp32 master weights
// and moments. Holds the state of one contiguous range of the flat parameter
// buffer, so ZeRO-1 can give each data-parallel rank its own shard.
#pragma once

#include <cstdint>
#include <vector>

namespace multiscreen {

struct AdamWHyper {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;  // λ (paper: 0)
};

class AdamW {
 public:
  // `size` elements; decay[i] != 0 where weight decay applies (may be empty: all decay).
  AdamW(int64_t size, AdamWHyper hyper, std::vector<uint8_t> decay = {});

  // One update of params[0, size) from grads[0, size) at learning rate lr.
  void Step(float* params, const float* grads, double lr);

  int64_t step() const { return step_; }
  int64_t size() const { return static_cast<int64_t>(m_.size()); }
  std::vector<float>& m() { return m_; }
  std::vector<float>& v() { return v_; }
  const std::vector<float>& m() const { return m_; }
  const std::vector<float>& v() const { return v_; }
  void set_step(int64_t step) { step_ = step; }

 private:
  AdamWHyper hyper_;
  std::vector<uint8_t> decay_;
  std::vector<float> m_, v_;
  int64_t step_ = 0;
};

}  // namespace multiscreen
