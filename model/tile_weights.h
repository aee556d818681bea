// A layer's tile weights as the kernels consume them: the projection matrices
// packed side by side for one GEMM, and the learned scalars mapped to
// w = e^{s_w} + 1, r = σ(s_r), scale = e^{s_O} (spec step 4, 13).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/screening.h"
#include "model/param_layout.h"

namespace multiscreen {

// Inference-time window rule (spec "Inference").
struct InferenceOptions {
  bool expand_windows = true;  // w → ∞ for tiles whose w exceeds train_len ("as learned" when false)
  int64_t train_len = 4096;    // longest training sequence length
};

// Offsets of a layer's tensors from ParamLayout::LayerEntry(layer).
enum LayerTensor { kWQ = 0, kWK, kWV, kWG, kWO, kSw, kSr, kSO };

// w_cat [d_E, tiles·(2d_K + 2d_V)] ← per local tile h the columns
// [W_Q[h] | W_K[h] | W_V[h] | W_G[h]] of global layer `layer` (resized).
template <typename Real>
void PackProjections(const ParamLayout& layout, const Real* params, int64_t layer, std::vector<Real>* w_cat);

// Adds the packed gradient d_w_cat (same layout as PackProjections) into the
// W_Q, W_K, W_V, W_G slots of grads.
template <typename Real>
void UnpackProjectionsAdd(const ParamLayout& layout, const Real* d_w_cat, int64_t layer, Real* grads);

// The local tiles' scalars of global layer `layer`; with `inference`, windows
// longer than inference->train_len become infinite (MiPE keeps the learned w).
template <typename Real>
std::vector<kernels::cpu::TileScalars> MapTileScalars(const ParamLayout& layout, const Real* params, int64_t layer,
                                                      const InferenceOptions* inference);

}  // namespace multiscreen
