// The single-rank softmax cross-entropy head on the CPU (kernels::HeadLossArgs, spec
// steps 14–15), fused over row chunks: the logits of a chunk are made, turned into the
// softmax's numerators in place and contracted back while in cache, so no [rows, V]
// matrix is ever held. Two ways of making them:
// - panels (kernels/cpu/head_panels.h) when the softmax shift is fixed (PLNorm bounds
//   the logits by e^{s_F}) and d_E is a whole number of 64-byte vectors: Ē packed once
//   per step, logits, exp and both backward products in register tiles, the vocabulary
//   in blocks of panels, one thread each, summed in order;
// - whole rows through Gemm otherwise (and always under HeadPath::kBlas): oneDNN on the
//   avx512 path, OpenBLAS elsewhere (kernels/cpu/gemm.h), the two backward products in
//   blocks of the vocabulary (head_loss.cc's ZTimesEBar, AddYsTimesZ);
// - under kBf16 (float) whole rows, whatever the head path, the three products on bf16
//   operands with fp32 accumulation: y, Ē, the softmax's numerators and c/Σ ⊙ y rounded to
//   bf16 (a device's bf16 head rounds c (softmax − onehot) instead: the same rounding of each
//   value up to the one-hot part, which stays exact here); on the CPU's bf16 dot products
//   (kernels/cpu/gemm_bf16.h) with Ē's bf16 copy from args.e_bar_packed, else as fp32
//   products of the rounded values.
// The softmax's 1/Σ and the loss weight are folded into the backward products' small
// operands, and the targets' one-hot part is added apart.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kernel_table.h"

namespace multiscreen::kernels::cpu {

// Whether the panel kernels can serve a head of width d_e under `path` (the fixed softmax
// shift, PLNorm's, decides per call). HeadPanelsAllowed (model/) adds the model's terms.
template <typename Real>
bool HeadPanelsServe(HeadPath path, int64_t d_e);

template <typename Real>
class FusedHead {
 public:
  explicit FusedHead(const KernelOptions& options) : options_(options) {}

  // HeadPanelsServe under these options.
  bool PanelsAllowed(int64_t d_e) const { return HeadPanelsServe<Real>(options_.head_path, d_e); }
  // Packs Ē [vocab, d_e] into panels when PanelsAllowed and the options' precision is not
  // kBf16 (once per step).
  void Prepare(const Real* e_bar, int64_t vocab, int64_t d_e);
  // kernels::HeadLossArgs's loss and gradient; args.e_bar must be what Prepare packed.
  void Run(const HeadLossArgs<Real>& args);

 private:
  // Rows [r0, r0 + rc) with gradients: numerators, then dy and ∂Ē; `bf16`: operands rounded
  // to bf16, `e16`: Ē's bf16 copy for the bf16 dot products (null: fp32 products).
  void FusedChunk(const HeadLossArgs<Real>& a, int64_t r0, int64_t rc, bool panels, bool bf16, const uint16_t* e16);
  // z [rc, V] = scale · y Ēᵀ for rows [r0, r0 + rc): fp32, or on bf16 operands (e16 non-null).
  void Logits(const HeadLossArgs<Real>& a, int64_t r0, int64_t rc, const uint16_t* e16, Real* z);
  // The panel kernels' softmax statistics of rows [r0, r0 + rc) with the fixed shift:
  // lse, target_logit and row_scale_ (1/Σ); with dy, also dy = z Ē for those rows
  // (z_ then holds the numerators, in panels).
  void PanelSoftmax(const HeadLossArgs<Real>& a, int64_t r0, int64_t rc, Real* dy);

  KernelOptions options_;
  bool packed_ = false;
  std::vector<Real> z_, y_scaled_;
  std::vector<Real> e_bar_panels_, d_e_bar_panels_;  // Ē and ∂L/∂Ē in head_panels.h's layout
  std::vector<double> row_scale_, block_sum_;
  std::vector<Real> block_dy_;
  std::vector<uint16_t> y16_, z16_;  // the bf16 products' operands (a chunk's y or c/Σ ⊙ y, its numerators)
};

}  // namespace multiscreen::kernels::cpu
