// Token-by-token inference with a decoding cache (spec "Inference"): per tile
// the k̃ (normalized, rotated by MiPE at its absolute position) and v̄ of past
// tokens; a finite-window tile keeps only its last ⌈w⌉ keys in a ring buffer,
// an infinite-window tile (window expansion) keeps all. Logits equal those of
// Multiscreen::Logits over the whole prefix, YaRN's frequencies included (position ROPE
// with options.yarn_factor ≠ 1; docs/ablations.md). Each tile's cache is a
// ScreeningTileCache (model/screening_cache.h), shared with the Transformer's screening heads.
#pragma once

#include <cstdint>
#include <vector>

#include "common/config.h"
#include "kernels/cpu/rope.h"
#include "model/decoder.h"
#include "model/param_layout.h"
#include "model/screening_cache.h"
#include "model/tile_weights.h"

namespace multiscreen {

template <typename Real>
class DecodeSession final : public Decoder<Real> {
 public:
  // `params`: the full layout's buffer (ShardSpec::Full), read during the session.
  DecodeSession(const ModelDims& dims, const Real* params, const InferenceOptions& options);

  // Feeds the token at absolute position position(); writes logits [V] for the next token.
  void Step(int32_t token, Real* logits) override;
  int64_t position() const override { return position_; }
  // Keys held by (layer, tile)'s cache: min(position, ⌈w⌉), or position for w = ∞.
  int64_t CachedKeys(int64_t layer, int64_t tile) const;

 private:
  ParamLayout layout_;
  const Real* params_;
  std::vector<Real> e_bar_;                  // Ē [V, d_E]
  std::vector<DeviceArray<Real>> w_cat_;     // per layer, PackProjections
  std::vector<std::vector<ScreeningTileCache<Real>>> caches_;  // [layer][tile]
  int64_t position_ = 0;
  kernels::cpu::RopeScaling rope_scaling_;  // position ROPE: YaRN's θ'_p (options.yarn_factor ≠ 1)
};

}  // namespace multiscreen
