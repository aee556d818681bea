// The LLaMA-style Transformer baseline (spec "Transformer baseline") on one shard of
// layers: pre-norm RMSNorm (gain only), RoPE θ = 10,000, causal softmax attention,
// SwiGLU FFN of width ⌊8 d_E/3⌋, tied embeddings, no biases, a final RMSNorm without
// gain. Per layer, for x [B·T, d_E]:
//   a = RMSNorm(x; attn_norm); q, k, v = a W_Q, a W_K, a W_V (per head, width d_h);
//   q, k ← RoPE(q), RoPE(k); [qk_norm: q, k ← unit rows, scale_h = e^{s_QK,h}, else
//   scale_h = 1/√d_h]; o = attention_causal(scale_h q kᵀ) v; x ← x + o W_O, where
//   attention is dims.attention's mechanism (kernels/cpu/attention.h: softmax by default;
//   SSMax's learned s_SS,h is folded into scale_h, the kernel adding log n_i);
//   f = RMSNorm(x; ffn_norm); x ← x + (SiLU(f W_gateᵀ) ⊙ f W_upᵀ) W_down.
// attention SCREENING (issue 30; the paper's Table 7 last row) puts the screening unit
// in the head's place instead: no RoPE, no scale; per head h with its learned s_w,h, s_r,h,
//   o_h = TanhNorm(Σ_j Trim(q̃_i·k̃_j; r_h) · Softmask(j − i; w_h) · v̄_j)   (spec steps 4–11)
// with q̃, k̃ the unit q, k turned by MiPE and v̄ the unit v — a Multiscreen tile with
// d_K = d_V = d_h, no output gate and e^{s_O} = 1 (the screening kernels of the kernel
// table run it: W_Q, W_K, W_V are packed per head, [q_h | k_h | v_h], so the projection
// is their P). At inference the window rule of InferenceOptions applies as Multiscreen's.
// Embedding x⁰ = W_E[t] (sio: e^{s_E} Ē[t] with Ē the unit rows of W_E); head
// y = RMSNorm(x) without gain (pl_norm: y = x/‖x‖); logits y W_Eᵀ (sio: e^{s_F} y Ēᵀ).
//
// Written over two kernel tables: the shared one (kernels/kernel_table.h: GEMMs,
// embedding, unit rows, the fused head) and the Transformer's (kernels/
// transformer_kernels.h: RMSNorm, attention with RoPE, SwiGLU), on the CPU or a CUDA
// device (fp32). Computes one shard: layers (pipeline stages) and, over a tp group (issue 18,
// Megatron-LM's split, Shoeybi et al. 2019 §3), heads and the SwiGLU width: W_Q, W_K,
// W_V and W_gate, W_up column-split (this rank's heads / hidden units), W_O and W_down
// row-split, so each sub-layer's output is one all-reduce of partial sums in the
// forward, and each sub-layer's input gradient (∂L/∂ of the normed input) one all-reduce
// in the backward; the RMSNorm gains are replicated (their gradients are computed from
// replicated values). The tied table is vocabulary-parallel as Multiscreen's
// (model/sharded_head.h). tp must divide N_H; d_ff (⌊8 d_E/3⌋, odd for three of
// Table 4's four sizes) is split in proportion to the heads, rank r taking hidden
// units [⌊r·d_ff/tp⌋, ⌊(r+1)·d_ff/tp⌋) (ParamLayout), so the parts differ by at most one.
// Knows nothing of pipelines or data parallelism.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/device_array.h"
#include "kernels/transformer_kernels.h"
#include "model/model_stage.h"
#include "model/sharded_head.h"
#include "model/tile_weights.h"

namespace multiscreen {

// The first column of part p (0: W_Q, 1: W_K, 2: W_V) of head h in the packed [d_E, 3·heads·d_h]
// projection of `heads` heads of width d_h: [W_Q heads | W_K heads | W_V heads], or per head
// [q_h | k_h | v_h] with attention SCREENING (the screening kernels' P layout). The training
// model and the decoder (model/transformer_decode.h) pack alike.
inline int64_t QkvColumn(const ModelDims& dims, int p, int64_t h, int64_t heads) {
  const int64_t dh = dims.d_k;
  return dims.attention == AttentionKind::kScreening ? h * 3 * dh + p * dh : p * heads * dh + h * dh;
}

template <typename Real>
class Transformer final : public ModelStage<Real> {
 public:
  // Fatal (one line): a device without Transformer kernels, Multiscreen dims, or a tp
  // group whose size does not divide N_H or disagrees with the shard.
  Transformer(const ModelDims& dims, const ShardSpec& shard, ModelOptions options = {}, Communicator* tp = nullptr);

  const ParamLayout& layout() const override { return layout_; }
  const ModelDims& dims() const { return layout_.dims(); }

  // Packs the layers' compute weights, reads s_E, s_F, s_QK to the host, makes Ē (sio),
  // and packs the GEMMs' weights (W_QKV, W_O, [W_gate; W_up], W_down, the head's table)
  // once in the step's precision (KernelTable::PackOperand), which every micro-batch's
  // forward and backward read until the next BeginStep: new parameters (an update, a
  // load, an init) are seen only here.
  void BeginStep(const Real* params) override;
  // One Fill of grads (every gradient zeroed; the backward adds into them).
  void ZeroGradientsBeforeStep(Real* grads) override;
  void Embed(const Real* params, const int32_t* ids, int64_t n, Real* x) override;
  // `inference`: its yarn_factor (with train_len as YaRN's L), for attention SIGMOID its
  // bias's n (SigmoidBiasLength; T at training), and for attention SCREENING its window rule; the backward is of a training forward (no YaRN, learned windows).
  void LayersForward(const Real* params, int64_t B, int64_t T, Real* x,
                     const InferenceOptions* inference = nullptr) override;
  double HeadLoss(const Real* params, const Real* x, const int32_t* targets, int64_t n, Real* dx, Real* grads,
                  double grad_scale, Real* token_losses) override;
  void LayersBackward(const Real* params, Real* dx, Real* grads) override;
  void EmbedBackward(const Real* params, const int32_t* ids, int64_t n, const Real* dx, Real* grads) override;
  void EndStep(Real* grads) override;

 private:
  using Array = DeviceArray<Real>;
  // Offsets of a layer's tensors from ParamLayout::LayerEntry (s_QK only with qk_norm,
  // s_SS only with attention SSMAX, s_w and s_r only with attention SCREENING).
  struct Slots {
    int64_t attn_norm, w_q, w_k, w_v, w_o, s_qk, s_ss, s_w, s_r, ffn_norm, w_gate, w_up, w_down;
  };
  struct LayerActivations {
    explicit LayerActivations(Device d)
        : x_in(d), rstd1(d), xn1(d), qkv(d), q(d), k(d), v(d), q_norm(d), k_norm(d), v_norm(d), screen_h(d), o(d),
          x_mid(d), rstd2(d), xn2(d), gu(d), h(d) {}
    // Screening keeps q̃, k̃, v̄ [B, H_l, T, d_h] in q, k, v, their norms, and its aggregate.
    Array x_in, rstd1, xn1, qkv, q, k, v, q_norm, k_norm, v_norm, screen_h, o, x_mid, rstd2, xn2, gu, h;
    // The GEMMs' activation operands as they read them (PackRounded: converted once, read by
    // the forward's product and the backward's weight gradient).
    kernels::PackedOperand<Real> xn1_op, o_op, xn2_op, h_op;
    std::vector<double> lse;  // [B, N_H, T] host: the attention's row statistic (lse, or entmax's τ)
    kernels::ScreeningSaved<Real> saved();  // screening's view of q, k, v, the norms, screen_h
  };
  struct LayerWeights {
    explicit LayerWeights(Device d) : w_qkv(d), w_o(d), w_gu(d), w_down(d) {}
    // Local sizes: H_l heads (width d_l = H_l·d_h) and F_l hidden units of this tp rank.
    Array w_qkv;   // [d_E, 3 d_l]: columns QkvColumn(part, head)
    Array w_o;     // [d_l, d_E]  (heads·d_h rows)
    Array w_gu;    // [2 F_l, d_E]: rows [W_gate; W_up]
    Array w_down;  // [F_l, d_E]
    // The four as the GEMMs read them (packed by BeginStep from the arrays above, which
    // must stay unchanged while these are used).
    kernels::PackedOperand<Real> w_qkv_op, w_o_op, w_gu_op, w_down_op;
    std::vector<double> scale;  // [H_l] host: base_h (SSMax: base_h · s_SS,h), the kernels' scale_h
    std::vector<double> base;   // [H_l] host: 1/√d_h, or e^{s_QK}
    std::vector<Real> s_w, s_r, s_o;  // [H_l] host (screening): the heads' s_w, s_r; s_o zeros (scale 1)
  };
  Slots SlotsOf(int64_t layer) const;
  bool screening() const { return dims().attention == AttentionKind::kScreening; }
  // multiscreen::QkvColumn of this shard's local heads.
  int64_t QkvColumn(int p, int64_t h) const { return multiscreen::QkvColumn(dims(), p, h, layout_.shard().tiles()); }
  kernels::ScreeningShape ScreeningShapeOf(int64_t B, int64_t T) const;
  const Real* Table() const;  // the tied table as the GEMMs and the embedding see it
  // The host's scalars (s_E, s_F under SIO; each layer's s_QK, s_SS, s_w, s_r as the
  // attention has them) read with one wait, and the attention scales made from them.
  void ReadScalars(const Real* params);
  void RoundToCompute(Real* data, int64_t n) const;
  // Under kFp16 the backward's GEMM operands hold fp16 values, as Multiscreen's
  // (model/multiscreen.h): gradients are stored in 16 bits, so a loss scale too large
  // overflows to ±inf, which the trainer's loss scaling detects and skips. Rounds a
  // gradient in place (kFp16 only).
  void RoundGradientToCompute(Real* data, int64_t n) const;
  // grad [n] as a backward GEMM operand: itself, or under kFp16 its rounded copy in
  // d_delta_ (grad, the residual stream's gradient, stays fp32).
  const Real* GradientOperand(const Real* grad, int64_t n);

  int64_t LocalFfn() const;  // F_l: this rank's hidden units

  ParamLayout layout_;
  ModelOptions options_;
  SingleProcessCommunicator single_;
  Communicator* tp_;
  ShardedHeadBuffers<Real> sharded_;
  std::unique_ptr<kernels::KernelTable<Real>> ops_;
  std::unique_ptr<kernels::TransformerKernels<Real>> tk_;
  int64_t batch_ = 0, seq_ = 0;
  kernels::cpu::RopeScaling rope_;  // the last LayersForward's RoPE frequencies (YaRN's at inference)
  int64_t sigmoid_bias_length_ = 0;  // the last LayersForward's (SigmoidBiasLength)
  Real s_e_ = 0, s_f_ = 0;  // host copies (BeginStep; sio)
  Array table_, e_norm_, table_c_, d_table_;  // Ē (sio) or a copy of W_E, its row norms, its rounding, ∂L/∂table
  kernels::PackedOperand<Real> table_op_;     // Table() as the head's GEMMs read it (BeginStep; shard.head)
  std::vector<LayerWeights> weights_;
  std::vector<LayerActivations> acts_;
  // LayersBackward's scratch, and HeadLoss's.
  Array d_a_, d_qkv_, d_q_, d_k_, d_v_, d_o_, d_gu_, d_h_, d_w_qkv_, scratch_x_, d_delta_;
  // The backward's gradient operands as both of their GEMMs read them (PackAsGemm).
  kernels::PackedOperand<Real> d_out_op_, d_gu_op_, d_qkv_op_;
  Array y_, y_c_, y_stat_, dy_;
  std::vector<double> lse_, target_logit_;
  std::vector<int64_t> local_target_;
  Array step_x0_;
};

}  // namespace multiscreen
