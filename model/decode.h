// Multiscreen's token-by-token inference with a decoding cache (spec "Inference"): per
// layer one GEMM for every tile's q, k, v, g, the layer's screening cache
// (kernels/decode_cache.h: per tile the k̃ — normalized, turned by MiPE or RoPE at its
// absolute position — and v̄ of past tokens, a finite-window tile's last ⌈w⌉ in a ring
// buffer, an infinite-window tile's all), one GEMM for W_O; then PLNorm and the head's
// logits. Written once over a kernel table: on the CPU (the default) or a CUDA device
// (ModelOptions::device; docs/evaluation.md). Logits equal those of Multiscreen::Logits
// over the whole prefix, YaRN's frequencies included (position ROPE with
// options.yarn_factor ≠ 1; docs/ablations.md). Under bf16 the GEMM operands hold bf16
// values as in the forward (W_cat, W_O, Ē; x, P, U, y per token): the weights packed into
// the table's 16-bit operands once, at construction, and each token's GEMMs converting
// their activation row alone (KernelTable::GemmPacked).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/config.h"
#include "kernels/decode_cache.h"
#include "kernels/device_array.h"
#include "kernels/kernel_table.h"
#include "model/decoder.h"
#include "model/model_stage.h"
#include "model/param_layout.h"
#include "model/tile_weights.h"

namespace multiscreen {

template <typename Real>
class DecodeSession final : public Decoder<Real> {
 public:
  // `params`: the full layout's buffer (ShardSpec::Full) on placement.device, read here
  // (the weights are packed into the session's own arrays).
  DecodeSession(const ModelDims& dims, const Real* params, const InferenceOptions& options,
                const ModelOptions& placement = {});

  int64_t position() const override { return position_; }
  // Keys held by (layer, tile)'s cache: min(position, ⌈w⌉), or position for w = ∞.
  int64_t CachedKeys(int64_t layer, int64_t tile) const;

 protected:
  void FeedRows(const int32_t* tokens, int64_t rows) override;
  void HeadRows(int64_t rows) override;

 private:
  using Decoder<Real>::ops;
  using Decoder<Real>::LogitsRows;  // ops() and LogitsRows: the base's kernel table and logits
  ParamLayout layout_;
  Precision precision_;
  Real embed_scale_ = 1, head_scale_ = 1;     // e^{s_E}, e^{s_F}
  DeviceArray<Real> e_bar_;                   // Ē [V, d_E] (the compute precision's): what the embedding gathers
  std::vector<DeviceArray<Real>> w_cat_;      // per layer: PackProjections (the compute precision's)
  // The GEMMs' weights as the kernel table reads them, packed once (KernelTable::PackOperand):
  // Ē, and per layer W_cat and W_O (read from the parameters).
  kernels::PackedOperand<Real> e_bar_op_;
  std::vector<kernels::PackedOperand<Real>> w_cat_op_, w_o_op_;
  std::vector<std::unique_ptr<kernels::ScreeningCache<Real>>> caches_;  // per layer
  DeviceArray<Real> x_, p_, u_;  // a chunk's activations
  int64_t position_ = 0;
};

}  // namespace multiscreen
