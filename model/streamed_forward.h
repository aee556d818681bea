// The inference-only loss of a whole model held one stage at a time (issue 20:
// `forward --no_grad` of the 4B model on a machine smaller than its weights).
//
// The model's own stage pieces (model/model_stage.h) are composed as
// ModelStage::Loss composes them, but on stages built and loaded in turn: the
// embedding (W_E, s_E), then each layer alone, then the head (W_E, s_F). Each
// stage's parameters are asked of a loader just before its phase and freed after
// it, so the peak is the largest stage (the tied table at Ψ = 64: W_E, its unit
// rows Ē and the head's packed panels, 3 × 823 MB) plus the activations of one
// layer, instead of the whole model. Nothing here knows where parameters come
// from (a weights file, a checkpoint of any layout: the loader decides).
#pragma once

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "common/config.h"
#include "model/model_stage.h"
#include "model/param_layout.h"

namespace multiscreen {

// Fills params [layout.size()] (host memory) with the parameters of layout's shard,
// in its buffer order. Errors pass through StreamedLoss unchanged.
template <typename Real>
using StageLoader = std::function<absl::Status(const ParamLayout& layout, Real* params)>;

// The three kinds of stage StreamedLoss builds, in the order it builds them (for
// loaders, estimates and tests): the embedding shard (no layers, no head), layer
// `layer` alone, the head shard (no layers, no embedding). All tiles, all
// vocabulary rows.
ShardSpec EmbedStage(const ModelDims& dims);
ShardSpec LayerStage(const ModelDims& dims, int64_t layer);
ShardSpec HeadStage(const ModelDims& dims);

// Mean next-token cross-entropy of tokens [B, T+1] (sequence b is tokens[b(T+1) ..
// (b+1)(T+1))) over the B·T positions, and token_losses [B, T] when non-null: the
// same bits as ModelStage::ForwardBackward / Loss of the whole model with the same
// options (each stage runs the same kernels on the same values in the same order;
// tested against them). options.device may be a GPU: parameters are staged to it
// per stage. Errors: the loader's.
template <typename Real>
absl::StatusOr<double> StreamedLoss(const ModelDims& dims, ModelOptions options, const StageLoader<Real>& load,
                                    const int32_t* tokens, int64_t B, int64_t T, Real* token_losses);

// An estimate of StreamedLoss's peak memory in bytes, for refusing a --memory bound up
// front: the largest stage's parameters twice (loaded, and the copies BeginStep
// packs: Ē, or a layer's packed projections), the head's panels and one [chunk, V]
// block of logits, and one layer's activations for B·T rows. Multiscreen only (a
// Transformer's activations are not counted).
int64_t StreamedLossBytes(const ModelDims& dims, int64_t B, int64_t T, int64_t real_bytes,
                          int64_t head_chunk_rows = 512);

}  // namespace multiscreen
