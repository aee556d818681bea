// The Transformer kernels on the CPU (kernels/transformer_kernels.h): each op is the
// kernel of kernels/cpu/ it names, on host memory, OpenMP threads.
#pragma once

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
  void Rope(Real* x, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t d_h, bool inverse,
            const cpu::RopeScaling& scaling) override {
    cpu::Rope(x, ld, B, T, heads, d_h, inverse, 0, scaling);
  }
  void AttentionForward(const AttentionShape& shape, const Real* q, const Real* k, const Real* v,
                        const double* scale, Real* o, double* lse) override {
    cpu::AttentionForward(shape, q, k, v, scale, o, lse);
  }
  void AttentionBackward(const AttentionShape& shape, const Real* q, const Real* k, const Real* v, const Real* o,
                         const double* lse, const Real* d_o, const double* scale, Real* dq, Real* dk, Real* dv,
                         double* d_scale) override {
    cpu::AttentionBackward(shape, q, k, v, o, lse, d_o, scale, dq, dk, dv, d_scale);
  }
  void SwiGluForward(const Real* gu, Real* h, int64_t rows, int64_t f) override { cpu::SwiGluForward(gu, h, rows, f); }
  void SwiGluBackward(const Real* gu, const Real* dh, Real* dgu, int64_t rows, int64_t f) override {
    cpu::SwiGluBackward(gu, dh, dgu, rows, f);
  }
};

}  // namespace multiscreen::kernels::cpu
