// Decoding the Transformer baseline (model/transformer.h) with a KV cache (issue 18):
// per layer the RoPE-rotated (and, with qk_norm, unit) keys and the values of every
// past token, so each new token costs one row through the layers plus attention over
// the cached positions (by dims.attention's mechanism), instead of the whole prefix. Logits equal the last row of
// Transformer's forward over the prefix to rounding (tests/model/transformer_test.cc).
// The cache grows by 2·d_E values per layer per token (no window: every past token is
// attended to). With attention SCREENING each head keeps a screening cache instead
// (model/screening_cache.h: its last ⌈w⌉ keys, or all for an expanded window). CPU, any Real.
#pragma once

#include <cstdint>
#include <vector>

#include "common/config.h"
#include "model/decoder.h"
#include "kernels/cpu/rope.h"
#include "model/param_layout.h"
#include "model/screening_cache.h"
#include "model/tile_weights.h"

namespace multiscreen {

template <typename Real>
class TransformerDecodeSession final : public Decoder<Real> {
 public:
  // `params`: the full layout's buffer (ShardSpec::Full), read during the session.
  // options.yarn_factor ≠ 1: YaRN's frequencies and logit scale (kernels/cpu/rope.h), with
  // options.train_len as its L; the window rule applies to attention SCREENING's heads.
  TransformerDecodeSession(const ModelDims& dims, const Real* params, const InferenceOptions& options = {});

  void Step(int32_t token, Real* logits) override;
  int64_t position() const override { return position_; }

 private:
  struct Layer {
    const Real *attn_norm, *w_o, *ffn_norm, *w_gu, *w_down;  // into params (W_gate, W_up adjacent: [2 d_ff, d_E])
    std::vector<Real> w_qkv;     // [d_E, 3 d_E]: columns [W_Q heads | W_K heads | W_V heads]
    std::vector<double> scale;   // [N_H]: 1/√d_h, or e^{s_QK}; SSMax: times s_SS
    std::vector<Real> k, v;      // [position, d_E]: the cache
    std::vector<ScreeningTileCache<Real>> screens;  // attention SCREENING: per head (k, v unused)
  };
  void FfnStep(const Layer& L, Real* x);  // x += the layer's SwiGLU FFN of RMSNorm(x)
  ParamLayout layout_;
  std::vector<Real> table_;  // [V, d_E]: Ē (sio) or W_E
  Real embed_scale_ = 1, head_scale_ = 1;  // e^{s_E}, e^{s_F} (sio) or 1
  std::vector<Layer> layers_;
  kernels::cpu::RopeScaling yarn_;
  int64_t position_ = 0;
};

}  // namespace multiscreen
