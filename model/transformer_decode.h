// Decoding the Transformer baseline (model/transformer.h) with a KV cache (issue 18):
// each new token is one row through the layers — RMSNorm, the packed W_QKV GEMM, the
// layer's decoding cache (kernels/decode_cache.h: the RoPE-turned, with qk_norm unit,
// keys and the values of every past token and one query's attention over them by
// dims.attention's mechanism; with attention SCREENING each head's screening cache
// instead, its last ⌈w⌉ keys or all for an expanded window), W_O, the SwiGLU FFN — and
// the head, instead of the whole prefix. Logits equal the last row of Transformer's
// forward over the prefix to rounding (tests/model/transformer_test.cc). The KV cache
// grows by 2·d_E values per layer per token (no window). Written once over the kernel
// table and the Transformer kernels: on the CPU (the default) or a CUDA device
// (ModelOptions::device); under bf16 the GEMM operands hold bf16 values as in the forward:
// the weights packed into the table's 16-bit operands once, at construction, and each
// token's GEMMs converting their activation row alone (KernelTable::GemmPacked).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/config.h"
#include "kernels/decode_cache.h"
#include "kernels/device_array.h"
#include "kernels/kernel_table.h"
#include "kernels/transformer_kernels.h"
#include "model/decoder.h"
#include "model/model_stage.h"
#include "model/param_layout.h"

namespace multiscreen {

template <typename Real>
class TransformerDecodeSession final : public Decoder<Real> {
 public:
  // `params`: the full layout's buffer (ShardSpec::Full) on placement.device, read during
  // the session (the norms' gains; in fp32 also W_O, W_gate, W_up, W_down).
  // options.yarn_factor ≠ 1: YaRN's frequencies and logit scale (kernels/cpu/rope.h), with
  // options.train_len as its L; the window rule applies to attention SCREENING's heads.
  TransformerDecodeSession(const ModelDims& dims, const Real* params, const InferenceOptions& options = {},
                           const ModelOptions& placement = {});

  int64_t position() const override { return position_; }

 protected:
  void FeedRows(const int32_t* tokens, int64_t rows) override;
  void HeadRows(int64_t rows) override;

 private:
  using Decoder<Real>::ops;
  using Decoder<Real>::LogitsRows;  // ops() and LogitsRows: the base's kernel table and logits
  struct Layer {
    explicit Layer(Device device) : w_qkv(device) {}
    const Real *attn_norm = nullptr, *ffn_norm = nullptr;  // gains, into params
    DeviceArray<Real> w_qkv;     // [d_E, 3 d_E]: columns QkvColumn(part, head)
    // The GEMMs' weights as the kernel table reads them, packed once
    // (KernelTable::PackOperand): W_QKV, W_O, [W_gate; W_up] ([2 d_ff, d_E]), W_down.
    kernels::PackedOperand<Real> w_qkv_op, w_o, w_gu, w_down;
    std::unique_ptr<kernels::AttentionCache<Real>> attention;  // the softmax family
    std::unique_ptr<kernels::ScreeningCache<Real>> screens;   // attention SCREENING: a unit per head
  };
  ParamLayout layout_;
  Precision precision_;
  std::unique_ptr<kernels::TransformerKernels<Real>> tk_;
  DeviceArray<Real> table_store_;  // Ē (sio), or W_E rounded (bf16); unused for W_E in fp32
  const Real* table_ = nullptr;    // [V, d_E] as the embedding reads it
  kernels::PackedOperand<Real> table_op_;  // table_ as the head's GEMM reads it, packed once
  Real embed_scale_ = 1, head_scale_ = 1;  // e^{s_E}, e^{s_F} (sio) or 1
  std::vector<Layer> layers_;
  DeviceArray<Real> x_, a_, qkv_, o_, gu_, hidden_, rstd_;  // a chunk's activations
  int64_t position_ = 0;
};

}  // namespace multiscreen
