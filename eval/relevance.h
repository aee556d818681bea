// Direct inspection (spec "Evaluations", the paper's relevance maps): the model's forward
// written out step by step in double precision (spec steps 1–14, the inference window rule
// of MapTileScalars; for position ROPE, YaRN's frequencies when options.yarn_factor ≠ 1),
// keeping per tile the relevance of every query–key pair inside the
// window: Trim's α_ij = max(1 − (1 − s_ij)/r, 0)² and Softmask's m_ij, listed sparsely (only
// pairs with α_ij · m_ij > 0). Its logits equal Multiscreen::Logits (tests/eval), which is
// what makes the maps the model's. O(T · ⌈w⌉) per tile: meant for texts of a few thousand
// tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "checkpoint/weights_file.h"
#include "model/tile_weights.h"

namespace multiscreen::eval {

struct RelevancePair {
  int32_t i = 0, j = 0;  // query and key positions, j ≤ i
  float alpha = 0;       // Trim
  float mask = 0;        // Softmask m_ij
};

struct TileRelevance {
  int64_t layer = 0, tile = 0;
  double w = 0, r = 0;         // learned: w = e^{s_w} + 1, r = σ(s_r)
  double w_used = 0;           // the window applied (∞ when expanded)
  int64_t window_pairs = 0;    // pairs (i, j) with m_ij > 0
  int64_t nonzero_pairs = 0;   // of those, the ones Trim accepts (α_ij > 0)
  std::vector<RelevancePair> pairs;  // kept only for the tiles asked for
};

// Runs the forward over ids [T]. `keep(layer, tile)` says which tiles keep their pairs;
// every tile gets its counts. When `logits` is non-null it receives [T, V].
std::vector<TileRelevance> InspectRelevance(const Weights& weights, const InferenceOptions& options,
                                            const std::vector<int32_t>& ids,
                                            const std::vector<std::vector<bool>>& keep, std::vector<double>* logits);

}  // namespace multiscreen::eval
