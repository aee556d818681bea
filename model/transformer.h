// The LLaMA-style Transformer baseline (spec "Transformer baseline") on one shard of
// layers: pre-norm RMSNorm (gain only), RoPE θ = 10,000, causal softmax attention,
// SwiGLU FFN of width ⌊8 d_E/3⌋, tied embeddings, no biases, a final RMSNorm without
// gain. Per layer, for x [B·T, d_E]:
//   a = RMSNorm(x; attn_norm); q, k, v = a W_Q, a W_K, a W_V (per head, width d_h);
//   q, k ← RoPE(q), RoPE(k); [qk_norm: q, k ← unit rows, scale_h = e^{s_QK,h}, else
//   scale_h = 1/√d_h]; o = softmax_causal(scale_h q kᵀ) v; x ← x + o W_O;
//   f = RMSNorm(x; ffn_norm); x ← x + (SiLU(f W_gateᵀ) ⊙ f W_upᵀ) W_down.
// Embedding x⁰ = W_E[t] (sio: e^{s_E} Ē[t] with Ē the unit rows of W_E); head
// y = RMSNorm(x) without gain (pl_norm: y = x/‖x‖); logits y W_Eᵀ (sio: e^{s_F} y Ēᵀ).
//
// Written over two kernel tables: the shared one (kernels/kernel_table.h: GEMMs,
// embedding, unit rows, the fused head) and the Transformer's (kernels/
// transformer_kernels.h: RMSNorm, RoPE, attention, SwiGLU), which exists on the CPU
// only. Computes one shard of layers (pipeline stages); tensor parallelism is not
// implemented (tp must be 1: refused by ValidateRun and here). Knows nothing of
// pipelines or data parallelism.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/device_array.h"
#include "kernels/transformer_kernels.h"
#include "model/model_stage.h"

namespace multiscreen {

template <typename Real>
class Transformer final : public ModelStage<Real> {
 public:
  // Fatal (one line): a device without Transformer kernels, a tp group above one, or
  // Multiscreen dims.
  Transformer(const ModelDims& dims, const ShardSpec& shard, ModelOptions options = {}, Communicator* tp = nullptr);

  const ParamLayout& layout() const override { return layout_; }
  const ModelDims& dims() const { return layout_.dims(); }

  double ForwardBackward(const Real* params, const int32_t* tokens, int64_t B, int64_t T, Real* grads,
                         Real* token_losses = nullptr, double grad_scale = 1.0) override;
  double Loss(const Real* params, const int32_t* tokens, int64_t B, int64_t T, Real* token_losses = nullptr) override;

  // Packs the layers' compute weights, reads s_E, s_F, s_QK to the host, makes Ē (sio).
  void BeginStep(const Real* params) override;
  void Embed(const Real* params, const int32_t* ids, int64_t n, Real* x) override;
  // `inference` is ignored (no windows in this family).
  void LayersForward(const Real* params, int64_t B, int64_t T, Real* x,
                     const InferenceOptions* inference = nullptr) override;
  double HeadLoss(const Real* params, const Real* x, const int32_t* targets, int64_t n, Real* dx, Real* grads,
                  double grad_scale, Real* token_losses) override;
  void LayersBackward(const Real* params, Real* dx, Real* grads) override;
  void EmbedBackward(const Real* params, const int32_t* ids, int64_t n, const Real* dx, Real* grads) override;
  void EndStep(Real* grads) override;

 private:
  using Array = DeviceArray<Real>;
  // Offsets of a layer's tensors from ParamLayout::LayerEntry (s_QK only with qk_norm).
  struct Slots {
    int64_t attn_norm, w_q, w_k, w_v, w_o, s_qk, ffn_norm, w_gate, w_up, w_down;
  };
  struct LayerActivations {
    explicit LayerActivations(Device d)
        : x_in(d), rstd1(d), xn1(d), qkv(d), q(d), k(d), v(d), q_norm(d), k_norm(d), o(d), x_mid(d), rstd2(d),
          xn2(d), gu(d), h(d) {}
    Array x_in, rstd1, xn1, qkv, q, k, v, q_norm, k_norm, o, x_mid, rstd2, xn2, gu, h;
    std::vector<double> lse;  // [B, N_H, T] host
  };
  struct LayerWeights {
    explicit LayerWeights(Device d) : w_qkv(d), w_o(d), w_gu(d), w_down(d) {}
    Array w_qkv;   // [d_E, 3 d_E]: columns [W_Q heads | W_K heads | W_V heads]
    Array w_o;     // [d_E, d_E]  (heads·d_h rows)
    Array w_gu;    // [2 d_ff, d_E]: rows [W_gate; W_up]
    Array w_down;  // [d_ff, d_E]
    std::vector<double> scale;  // [N_H] host: 1/√d_h, or e^{s_QK}
  };
  Slots SlotsOf(int64_t layer) const;
  const Real* Table() const;  // the tied table as the GEMMs and the embedding see it
  void RoundToCompute(Real* data, int64_t n) const;
  void SplitWindows(const int32_t* tokens, int64_t B, int64_t T);

  ParamLayout layout_;
  ModelOptions options_;
  std::unique_ptr<kernels::KernelTable<Real>> ops_;
  std::unique_ptr<kernels::TransformerKernels<Real>> tk_;
  int64_t batch_ = 0, seq_ = 0;
  Real s_e_ = 0, s_f_ = 0;  // host copies (BeginStep; sio)
  Array table_, e_norm_, table_c_, d_table_;  // Ē (sio) or a copy of W_E, its row norms, its rounding, ∂L/∂table
  std::vector<LayerWeights> weights_;
  std::vector<LayerActivations> acts_;
  // LayersBackward's scratch, and HeadLoss's.
  Array d_a_, d_qkv_, d_q_, d_k_, d_v_, d_o_, d_gu_, d_h_, d_w_qkv_, scratch_x_;
  Array y_, y_c_, y_stat_, dy_;
  std::vector<double> lse_, target_logit_;
  std::vector<int64_t> local_target_;
  Array step_x_, step_dx_, step_x0_;
  std::vector<int32_t> step_inputs_, step_targets_;
};

}  // namespace multiscreen
