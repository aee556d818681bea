// The Transformer baseline's own ops (spec "Transformer baseline"), beside the kernel
// table (kernels/kernel_table.h) whose shared ops (GEMMs, embedding, unit rows, the
// fused head, AdamW) the Transformer model also uses. Same conventions as the table:
// tensors are row-major arrays of Real on device(), per-row fp64 statistics (the
// attention's lse) and per-head scalars live in host memory.
//
// Implementations: the CPU's (kernels/cpu/{rms_norm,rope,attention,swiglu}.h, any Real)
// and, in a build with CUDA, the GPU's (kernels/cuda/cuda_transformer_kernels.h, float).
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/buffer.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/rope.h"
#include "kernels/kernel_table.h"

namespace multiscreen {
namespace kernels {

using cpu::AttentionShape;

template <typename Real>
class TransformerKernels {
 public:
  virtual ~TransformerKernels() = default;
  virtual Device device() const = 0;

  // kernels/cpu/rms_norm.h: y = g ⊙ x/√(mean x² + ε) (gain null: none), rstd [rows] saved.
  virtual void RmsNormForward(const Real* x, const Real* gain, Real* y, Real* rstd, int64_t rows, int64_t d) = 0;
  virtual void RmsNormBackward(const Real* x, const Real* gain, const Real* rstd, const Real* dy, Real* dx,
                               Real* dgain, int64_t rows, int64_t d, bool accumulate) = 0;
  // kernels/cpu/attention.h: scale, lse and d_scale are host arrays. rope: RoPE inside the
  // op (kernels/cpu/rope.h, with these frequencies: YaRN's at inference, plain RoPE by
  // default): q and k are the unturned rows, the attention is of RoPE(q), RoPE(k) at
  // positions 0 … T − 1 of each sequence, and the backward's dq, dk are the gradients of
  // the unturned q, k (RoPE's transpose applied); d_h even. Null: q, k as given. The CPU
  // turns copies of q and k before its kernel and dq, dk after it; the CUDA tiled kernel
  // turns them as it loads them (kernels/cuda/attention_tiled.h), the simple one as the CPU.
  virtual void AttentionForward(const AttentionShape& shape, const Real* q, const Real* k, const Real* v,
                                const double* scale, Real* o, double* lse,
                                const cpu::RopeScaling* rope = nullptr) = 0;
  virtual void AttentionBackward(const AttentionShape& shape, const Real* q, const Real* k, const Real* v,
                                 const Real* o, const double* lse, const Real* d_o, const double* scale, Real* dq,
                                 Real* dk, Real* dv, double* d_scale, const cpu::RopeScaling* rope = nullptr) = 0;
  // kernels/cpu/swiglu.h: gu [rows, 2f] = [gate | up], h [rows, f].
  virtual void SwiGluForward(const Real* gu, Real* h, int64_t rows, int64_t f) = 0;
  virtual void SwiGluBackward(const Real* gu, const Real* dh, Real* dgu, int64_t rows, int64_t f) = 0;
};

}  // namespace kernels

// The Transformer kernels of `device`. options: the CUDA kernels' attention
// (KernelOptions::precision and attention_kernel; kernels/cuda/cuda_kernel_table.h's
// TiledAttention); the CPU's ignore them. Errors (one line, as MakeKernelTable's): CUDA
// for double, a build without CUDA, no device visible, a driver too old, a bad
// MULTISCREEN_ATTENTION_KERNEL.
template <typename Real>
absl::StatusOr<std::unique_ptr<kernels::TransformerKernels<Real>>> MakeTransformerKernels(
    Device device, const KernelOptions& options = {});

}  // namespace multiscreen
