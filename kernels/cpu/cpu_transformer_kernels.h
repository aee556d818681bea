// The Transformer kernels on the CPU (kernels/transformer_kernels.h): each op is the
// kernel of kernels/cpu/ it names, on host memory, OpenMP threads; the attention's RoPE
// turns copies of q and k (kept between calls) before it and dq, dk in place after.
#pragma once

#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/rms_norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/transformer_kernels.h"

namespace multiscreen::kernels::cpu {

template <typename Real>
class CpuTransformerKernels final : public TransformerKernels<Real> {
 public:
  Device device() const override { return Device::kCpu; }
  void RmsNormForward(const Real* x, const Real* gain, Real* y, Real* rstd, int64_t rows, int64_t d) override {
    cpu::RmsNormForward(x, gain, y, rstd, rows, d);
  }
  void RmsNormBackward(const Real* x, const Real* gain, const Real* rstd, const Real* dy, Real* dx, Real* dgain,
                       int64_t rows, int64_t d, bool accumulate) override {
    cpu::RmsNormBackward(x, gain, rstd, dy, dx, dgain, rows, d, accumulate);
  }
  void AttentionForward(const AttentionShape& shape, const Real* q, const Real* k, const Real* v,
                        const double* scale, Real* o, double* lse, const cpu::RopeScaling* rope) override {
    if (rope != nullptr) Turn(shape, &q, &k, *rope);
    cpu::AttentionForward(shape, q, k, v, scale, o, lse);
  }
  void AttentionBackward(const AttentionShape& shape, const Real* q, const Real* k, const Real* v, const Real* o,
                         const double* lse, const Real* d_o, const double* scale, Real* dq, Real* dk, Real* dv,
                         double* d_scale, const cpu::RopeScaling* rope) override {
    if (rope != nullptr) Turn(shape, &q, &k, *rope);
    cpu::AttentionBackward(shape, q, k, v, o, lse, d_o, scale, dq, dk, dv, d_scale);
    if (rope == nullptr) return;
    const int64_t ld = shape.heads * shape.d_h;  // ∂L/∂q = RoPE(·)ᵀ ∂L/∂q̃, likewise k
    cpu::Rope(dq, ld, shape.batch, shape.seq, shape.heads, shape.d_h, /*inverse=*/true, 0, *rope);
    cpu::Rope(dk, ld, shape.batch, shape.seq, shape.heads, shape.d_h, /*inverse=*/true, 0, *rope);
  }
  void SwiGluForward(const Real* gu, Real* h, int64_t rows, int64_t f) override { cpu::SwiGluForward(gu, h, rows, f); }
  void SwiGluBackward(const Real* gu, const Real* dh, Real* dgu, int64_t rows, int64_t f) override {
    cpu::SwiGluBackward(gu, dh, dgu, rows, f);
  }

 private:
  // *q, *k pointed at turned copies RoPE(q), RoPE(k) (the members below).
  void Turn(const AttentionShape& shape, const Real** q, const Real** k, const cpu::RopeScaling& rope) {
    const int64_t ld = shape.heads * shape.d_h, n = shape.batch * shape.seq * ld;
    q_turned_.assign(*q, *q + n);
    k_turned_.assign(*k, *k + n);
    cpu::Rope(q_turned_.data(), ld, shape.batch, shape.seq, shape.heads, shape.d_h, false, 0, rope);
    cpu::Rope(k_turned_.data(), ld, shape.batch, shape.seq, shape.heads, shape.d_h, false, 0, rope);
    *q = q_turned_.data();
    *k = k_turned_.data();
  }

  std::vector<Real> q_turned_, k_turned_;
};

}  // namespace multiscreen::kernels::cpu
