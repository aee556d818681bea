// A layer's tile weights as the kernels consume them: the projection matrices
// packed side by side for one GEMM, and the learned scalars mapped to
// w = e^{s_w} + 1, r = σ(s_r), scale = e^{s_O} (spec step 4, 13).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/device_array.h"
#include "kernels/kernel_table.h"
#include "kernels/screening_types.h"
#include "model/param_layout.h"

namespace multiscreen {

// Inference-time window rule (spec "Inference").
struct InferenceOptions {
  bool expand_windows = true;  // w → ∞ for tiles whose w exceeds train_len ("as learned" when false)
  int64_t train_len = 4096;    // longest training sequence length
  // YaRN's scale factor F for a RoPE model (kernels/cpu/rope.h), train_len its L: 1 is
  // plain RoPE. The Transformer scales its frequencies and logits; Multiscreen with
  // position ROPE its frequencies only (docs/ablations.md); MIPE and NOPE have no RoPE and
  // ignore it (the CLI refuses it there).
  double yarn_factor = 1.0;
  // YaRN's ramp γ (kernels/cpu/rope.h): the paper's equation, or the authors' code's.
  kernels::cpu::YarnRamp yarn_ramp = kernels::cpu::YarnRamp::kPaper;
  // Attention SIGMOID with sigmoid_bias TRAIN_LENGTH: the n of its bias −log n for every
  // query; 0 means train_len (what the model trained with). `eval --sigmoid_bias_length`
  // sets it (a number, or auto: the evaluation's length), the method-specific inference-time
  // scaling of the paper's Table 7 (docs/attention.md). Other models ignore it.
  int64_t sigmoid_bias_length = 0;
};

// YaRN's RoPE scaling of `inference`: F = yarn_factor, L = train_len, yarn_ramp's γ.
kernels::cpu::RopeScaling YarnScalingOf(const InferenceOptions& inference);

// The n of sigmoid attention's bias b = −log n that a forward over sequences of T tokens
// uses (kernels/cpu/attention.h AttentionShape::sigmoid_bias_length): 0 (per query) for
// sigmoid_bias PER_QUERY; else, at inference, inference->sigmoid_bias_length or, when that
// is 0, inference->train_len; at training (inference null), T, the training length. 0 for
// a model whose attention is not SIGMOID.
int64_t SigmoidBiasLength(const ModelDims& dims, const InferenceOptions* inference, int64_t T);

// The screening shape of a Multiscreen layer of `tiles` tiles over B sequences of T
// tokens (spec steps 4–13: d_K, d_V, w_th and the switches of `dims`). Position ROPE at
// inference (`inference` non-null): YaRN's frequencies, F and L = train_len, as the
// Transformer reads them (docs/ablations.md); training and the other positions: none.
// One definition for the model's forward and backward and for its decoder.
kernels::ScreeningShape MultiscreenShape(const ModelDims& dims, int64_t tiles, int64_t B, int64_t T,
                                         const InferenceOptions* inference);

// The screening shape of the Transformer's screening attention (attention: SCREENING): its
// `heads` local heads over B sequences of T tokens as tiles of width d_K = d_V = d_h
// (dims.d_k), w_th of `dims`; MiPE, TanhNorm and no output gate (a head's u goes to W_O;
// no s_O: the caller's scales are 1), no RoPE and so nothing of YaRN. One definition for
// Transformer::ScreeningShapeOf (forward, backward) and for its decoder.
kernels::ScreeningShape TransformerScreeningShape(const ModelDims& dims, int64_t heads, int64_t B, int64_t T);

// Offsets of a layer's tensors from ParamLayout::LayerEntry(layer).
enum LayerTensor { kWQ = 0, kWK, kWV, kWG, kWO, kSw, kSr, kSO };

// w_cat [d_E, tiles·(2d_K + 2d_V)] ← per local tile h the columns
// [W_Q[h] | W_K[h] | W_V[h] | W_G[h]] of global layer `layer` (resized), on the
// kernel table's device (params there too).
template <typename Real>
void PackProjections(kernels::KernelTable<Real>& ops, const ParamLayout& layout, const Real* params, int64_t layer,
                     DeviceArray<Real>* w_cat);

// PackProjections then PackRounded(precision, w_cat, ·, out), in one pass
// (KernelTable::PackJobsRounded): the step's W_cat operand. A device under kBf16 and kFp16
// writes *out alone and leaves w_cat (resized) unwritten; the CPU and kFp32 fill w_cat
// and *out reads it.
template <typename Real>
void PackProjectionsRounded(kernels::KernelTable<Real>& ops, const ParamLayout& layout, const Real* params,
                            int64_t layer, Precision precision, DeviceArray<Real>* w_cat,
                            kernels::PackedOperand<Real>* out);

// The packed gradient d_w_cat (same layout as PackProjections) added into the W_Q, W_K,
// W_V, W_G slots of grads (accumulate), or written over them (not: the step's first
// backward, Multiscreen::ZeroGradientsBeforeStep), one launch; both on the table's device.
template <typename Real>
void UnpackProjections(kernels::KernelTable<Real>& ops, const ParamLayout& layout, const Real* d_w_cat,
                       int64_t layer, Real* grads, bool accumulate);

// The scalars of `tiles` tiles from their host values s_w, s_r, s_o [tiles]; with
// `inference`, windows longer than inference->train_len become infinite (MiPE keeps the
// learned w). The second form reads them from a host params buffer, for global layer `layer`.
template <typename Real>
std::vector<kernels::TileScalars> MapTileScalars(const Real* s_w, const Real* s_r, const Real* s_o, int64_t tiles,
                                                 const InferenceOptions* inference);
template <typename Real>
std::vector<kernels::TileScalars> MapTileScalars(const ParamLayout& layout, const Real* params, int64_t layer,
                                                 const InferenceOptions* inference);

}  // namespace multiscreen
