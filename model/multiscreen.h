// The Multiscreen model (shared/spec/MULTISCREEN.md) on one shard: the tiles
// [h0, h1) of layers [l0, l1) and the vocabulary rows [v0, v1) given by a
// ShardSpec; with ShardSpec::Full it is the single-process model. Training
// forward and backward, and the inference forward. All arithmetic goes through
// kernels/; the only communication is the tensor-parallel all-reduce of a
// layer's output (and of the vocabulary-parallel embedding and head), through
// the Communicator it is given. It knows nothing of pipelines or data
// parallelism: the trainer composes the stage pieces below.
//
// The step is written once, over a kernel table (kernels/kernel_table.h): every op on a
// tensor goes through it, and every tensor the model keeps is a DeviceArray on the
// table's device (ModelOptions::device). Pointers to parameters, gradients and
// activations (params, grads, x, dx) are on that device; token ids, targets and
// per-token losses are host arrays. The learned scalars (s_E, s_F and the tiles'
// s_w, s_r, s_O) are read to the host once per step, in BeginStep.
//
// Not thread-safe: one instance holds the activations of one micro-batch.
#pragma once

#include <type_traits>

#include <cstdint>
#include <memory>
#include <vector>

#include "common/config.h"
#include "kernels/cpu/rope.h"
#include "kernels/device_array.h"
#include "kernels/kernel_table.h"
#include "model/model_stage.h"
#include "model/sharded_head.h"
#include "model/param_layout.h"
#include "model/step_profile.h"
#include "model/tile_weights.h"
#include "kernels/communicator.h"

namespace multiscreen {

// Whether the vocabulary head runs the panel kernels: HeadPath::kPanels, PLNorm, a
// vocabulary on one tp rank and d_E a whole number of 64-byte vectors of Real (and, at
// run time, e^{s_F} < 39 so that the softmax shift is known). For start-up logs, bench.
template <typename Real>
bool HeadPanelsAllowed(const ModelDims& dims, int64_t tp, HeadPath path);

// "panels" or "blas", as HeadPanelsAllowed says; "bf16 rows" for a float head under kBf16
// (kernels/cpu/head_loss.h: whole rows, bf16 products, whatever the path).
template <typename Real>
const char* HeadPathName(const ModelDims& dims, int64_t tp, HeadPath path, Precision precision = Precision::kFp32) {
  if (std::is_same_v<Real, float> && precision == Precision::kBf16 && tp == 1) return "bf16 rows";
  return HeadPanelsAllowed<Real>(dims, tp, path) ? "panels" : "blas";
}

template <typename Real>
class Multiscreen final : public ModelStage<Real> {
 public:
  // `tp` is the tensor-parallel group of this shard (null: a group of one). A device
  // whose kernel table cannot be made (no CUDA in the build, no device visible; see
  // MakeKernelTable), or Transformer dims, is fatal here: callers check it first
  // (ResolveDevice in cli/device.h) or go through MakeModelStage.
  Multiscreen(const ModelDims& dims, const ShardSpec& shard, ModelOptions options = {},
              Communicator* tp = nullptr);

  const ParamLayout& layout() const override { return layout_; }
  const ModelDims& dims() const { return layout_.dims(); }

  // ---- the whole model: ModelStage's ForwardBackward and Loss -------------------------

  // Inference forward of one sequence: ids [T] at absolute positions pos0.., logits
  // [T, V] written to host memory (the full vocabulary; shards must own it all).
  void Logits(const Real* params, const int32_t* ids, int64_t T, const InferenceOptions& options, Real* logits);

  // ---- stage pieces (pipeline stages call these) ----------------------------------
  // Prepares Ē (unit rows of W_E) and the layers' packed compute weights for `params`,
  // and packs the GEMMs' weights (W_cat, W_O, the head's Ē) once in the step's precision
  // (KernelTable::PackOperand), which every micro-batch's forward and backward read until
  // the next BeginStep: new parameters (an update, a load, an init) are seen only here.
  void BeginStep(const Real* params) override;
  // Zeroes the gradients nothing overwrites first — s_E, s_F and every layer's s_w, s_r,
  // s_O (one Copy2DJobs launch from a zero scalar) — and flags this instance's next
  // LayersBackward to write its layers' W_O (GEMM with β = 0) and W_Q, W_K, W_V, W_G
  // (UnpackProjections without accumulate) instead of adding, and its next EndStep to
  // write W_E's. Bit for bit a Fill of grads then the adding step; NaNs left in grads
  // do not survive (no overwriting path reads what it overwrites).
  void ZeroGradientsBeforeStep(Real* grads) override;
  // x[n, d_E] = e^{s_E} · Ē[ids] (all-reduced over tp). Needs shard.embed.
  void Embed(const Real* params, const int32_t* ids, int64_t n, Real* x) override;
  // x ← x^{l1} from x^{l0} over the shard's layers for B sequences of T tokens.
  // Keeps what the backward needs. `inference` selects windows per `options`.
  void LayersForward(const Real* params, int64_t B, int64_t T, Real* x, const InferenceOptions* inference = nullptr) override;
  // Loss of x^{N_L} [n, d_E] against targets [n]; when dx is non-null also the
  // gradient: dx [n, d_E] written, head grads (s_F, W_E through Ē) added, all
  // scaled by grad_scale/n. Needs shard.head.
  double HeadLoss(const Real* params, const Real* x, const int32_t* targets, int64_t n, Real* dx,
                  Real* grads, double grad_scale, Real* token_losses) override;
  // Single-rank (tp = 1): the loss stays in the kernel table's sum (KernelTable::TakeHeadLoss),
  // no host read; the vocabulary-parallel head reads it (ModelStage's default).
  void HeadLossDeferred(const Real* params, const Real* x, const int32_t* targets, int64_t n, Real* dx, Real* grads,
                        double grad_scale) override;
  double TakeLoss() override;
  // dx ← ∂L/∂x^{l0} from ∂L/∂x^{l1}; adds the layers' parameter gradients (writes
  // their matrices' when ZeroGradientsBeforeStep flagged this call).
  void LayersBackward(const Real* params, Real* dx, Real* grads) override;
  // Adds the embedding's gradients (s_E, and W_E through Ē) from dx [n, d_E].
  void EmbedBackward(const Real* params, const int32_t* ids, int64_t n, const Real* dx, Real* grads) override;
  // One rank holding embedding and head, on a table that captures (ModelStage).
  bool CanCaptureMicroStep() const override;
  void PreloadInputs(const int32_t* ids, const int32_t* targets, int64_t n) override;
  // Every layer's tile tables for this step's scalars and (B, T), uploaded now (ModelStage).
  void PrepareMicroStep(int64_t B, int64_t T) override;
  // ∂Ē += e^{s_E}·dx scattered by id; ∂s_E += Σ dx·x⁰ with x⁰ = e^{s_E}·Ē[ids] recomputed.
  void EmbedTableBackward(const Real* params, const int32_t* ids, int64_t n, const Real* dx) override;
  void EmbedScaleBackward(const Real* params, const int32_t* ids, int64_t n, const Real* dx, Real* grads) override;
  // Moves the Ē gradient gathered by HeadLoss/EmbedBackward into W_E's slot of grads
  // (added; written when ZeroGradientsBeforeStep flagged this call).
  void EndStep(Real* grads) override;

 private:
  using Array = DeviceArray<Real>;
  struct LayerActivations {
    explicit LayerActivations(Device d)
        : x_in(d), P(d), U(d), q_tilde(d), k_tilde(d), v_bar(d), q_norm(d), k_norm(d), v_norm(d), h(d), gate(d) {}
    Array x_in, P, U;
    // x_in and U as the GEMMs read them (PackRounded, ScreeningForwardOperand: converted
    // once, read by the forward's product and the backward's weight gradient; U itself may
    // stay unwritten where the table writes u_op alone).
    kernels::PackedOperand<Real> x_in_op, u_op;
    // P's format as the table's ScreeningProjection wrote it (ScreeningShape::p_bf16), for
    // this layer's screening calls.
    bool p_bf16 = false;
    Array q_tilde, k_tilde, v_bar, q_norm, k_norm, v_norm, h;
    // The gate ĝ and dĝ/dg per token [rows, tiles, 2·d_V] (ScreeningSaved::gate): on the
    // CPU with the output gate on; empty otherwise (the CUDA kernels do not read it).
    Array gate;
    kernels::ScreeningSaved<Real> saved();
  };
  struct LayerWeights {
    explicit LayerWeights(Device d) : w_cat(d), w_o(d) {}
    Array w_cat;  // [d_E, tiles·p_cols]: per tile [W_Q | W_K | W_V | W_G]
    Array w_o;    // [tiles·d_V, d_E]: a compute copy of W_O
    // w_cat and w_o as the GEMMs read them (packed by BeginStep from the parameters:
    // PackJobsRounded; under kFp32 and on the CPU they read the arrays above, which must
    // stay unchanged while these are used; under 16 bits on a device those stay unwritten).
    kernels::PackedOperand<Real> w_cat_op, w_o_op;
    std::vector<Real> s_w, s_r, s_o;  // host copies of the tiles' scalars (BeginStep)
  };
  struct HeadBuffers {  // HeadLoss's buffers, kept between steps
    explicit HeadBuffers(Device d) : y(d), y_norm(d), y_c(d), dy(d), sharded(d) {}
    Array y, y_norm, y_c, dy;
    std::vector<double> target_logit, lse;  // host, per row
    std::vector<int64_t> local_target;      // host, per row
    ShardedHeadBuffers<Real> sharded;       // the vocabulary-parallel head's (tp > 1)
  };
  // HeadLoss and HeadLossDeferred: `deferred` (single-rank only) leaves the loss in the
  // table's sum and returns 0.
  double HeadPass(const Real* x, const int32_t* targets, int64_t n, Real* dx, Real* grads, double grad_scale,
                  Real* token_losses, bool deferred);
  kernels::ScreeningShape ShapeOf(int64_t B, int64_t T) const;
  // The local tiles' mapped scalars of local layer li (BeginStep read them).
  std::vector<kernels::TileScalars> TileScalarsOf(int64_t li, const InferenceOptions* inference) const;
  // Rounds a GEMM operand to the compute precision (no-op for kFp32).
  void RoundToCompute(Real* data, int64_t n) const;
  // Rounds a backward GEMM operand (only kFp16 stores gradients in 16 bits).
  void RoundGradientToCompute(Real* data, int64_t n) const;

  ParamLayout layout_;
  ModelOptions options_;
  std::unique_ptr<kernels::KernelTable<Real>> ops_;
  SingleProcessCommunicator single_;
  Communicator* tp_;
  int64_t batch_ = 0, seq_ = 0;
  kernels::cpu::RopeScaling rope_scaling_;  // position ROPE: YaRN of the last LayersForward (ShapeOf)
  Real s_e_ = 0, s_f_ = 0;                  // host copies (BeginStep)
  Array e_bar_, e_norm_, d_e_bar_;          // Ē [V_local, d_E], row norms, ∂L/∂Ē
  Array e_bar_compute_;                     // Ē rounded for the GEMMs (kBf16, kFp16; unused under kFp32)
  kernels::PackedOperand<Real> e_bar_op_;   // EBarCompute() as the head's GEMMs read it (BeginStep; shard.head)
  const Real* EBarCompute() const {
    return options_.precision == Precision::kFp32 ? e_bar_.data() : e_bar_compute_.data();
  }
  std::vector<LayerWeights> weights_;
  std::vector<LayerActivations> acts_;
  Array d_u_, d_p_, d_w_cat_, d_delta_, scratch_x_;
  // ∂Δ and ∂P as both of their GEMMs read them (PackAsGemm; ∂P: or ScreeningBackwardToOperand,
  // d_p_ then unused)
  kernels::PackedOperand<Real> d_delta_op_, d_p_op_;
  HeadBuffers head_;
  Array zero_;  // [1] = 0: the source ZeroGradientsBeforeStep copies from
  // Set by ZeroGradientsBeforeStep, cleared by the LayersBackward and EndStep they flag:
  // write the gradients instead of adding into them.
  bool overwrite_layer_grads_ = false, overwrite_w_e_ = false;
  Array step_x0_, logits_;  // EmbedBackward's x⁰, Logits' output
};

}  // namespace multiscreen
