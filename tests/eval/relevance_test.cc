// eval/relevance.h: the inspection forward is the model's (its logits equal
// Multiscreen::Logits under both window rules), and its counts and pairs follow the spec's
// Trim and Softmask; eval/model_runner.h: the decode path's losses equal the full pass's, and
// Prefill's token is the argmax of the last row of Logits; for the Transformer baseline
// (issue 18) the same through its KV cache, with every switch combination.
#include "eval/relevance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../model/test_model.h"
#include "eval/model_runner.h"
#include "model/decoder.h"
#include "model/init.h"
#include "model/multiscreen.h"

namespace multiscreen::eval {
namespace {

Weights TinyWeights(uint64_t seed, kernels::PositionKind position = kernels::PositionKind::kMipe,
                    bool output_gate = true) {
  Weights w;
  w.dims = testing::TinyDims("tiny_psi4");
  w.dims.position = position;  // issue 30's ablation switches
  w.dims.output_gate = output_gate;
  w.params = testing::PerturbedParams<float>(ParamLayout(w.dims, ShardSpec::Full(w.dims)), seed);
  return w;
}

TEST(RelevanceTest, InspectionLogitsEqualTheModelsUnderBothWindowRules) {
  // The standard model and issue 30's ablations (NOPE, ROPE, ROPE without the gate).
  for (const auto& [position, gate] : {std::pair{kernels::PositionKind::kMipe, true},
                                       std::pair{kernels::PositionKind::kNope, true},
                                       std::pair{kernels::PositionKind::kRope, true},
                                       std::pair{kernels::PositionKind::kRope, false}}) {
  const Weights w = TinyWeights(5, position, gate);
  const int64_t T = 40, V = w.dims.vocab;
  const std::vector<int32_t> ids = testing::RandomTokens(V, T, 7);
  for (bool expand : {false, true}) {
  // ROPE also with YaRN at inference (F = 4 over L = 6: its frequencies, docs/ablations.md).
  for (double yarn : position == kernels::PositionKind::kRope ? std::vector<double>{1.0, 4.0} : std::vector<double>{1.0}) {
    InferenceOptions o;
    o.expand_windows = expand;
    o.train_len = 6;  // perturbed windows reach 2·w_th: some tiles expand
    o.yarn_factor = yarn;
    std::vector<double> mine;
    InspectRelevance(w, o, ids, {}, &mine);
    Multiscreen<float> model(w.dims, ShardSpec::Full(w.dims));
    std::vector<float> theirs(T * V);
    model.Logits(w.params.data(), ids.data(), T, o, theirs.data());
    double worst = 0;
    for (int64_t n = 0; n < T * V; ++n) worst = std::max(worst, std::abs(mine[n] - theirs[n]));
    EXPECT_LT(worst, 2e-4) << "expand=" << expand << " position=" << kernels::PositionKindName(position)
                           << " gate=" << gate << " yarn=" << yarn;
  }
  }
  }
}

TEST(RelevanceTest, PairsAreInsideTheWindowAndAcceptedByTrim) {
  const Weights w = TinyWeights(9);
  const int64_t T = 30;
  const std::vector<int32_t> ids = testing::RandomTokens(w.dims.vocab, T, 3);
  InferenceOptions o;
  o.expand_windows = false;
  std::vector<std::vector<bool>> keep(w.dims.n_layers, std::vector<bool>(w.dims.n_heads, true));
  keep[0][1] = false;
  const auto tiles = InspectRelevance(w, o, ids, keep, nullptr);
  ASSERT_EQ(tiles.size(), size_t(w.dims.n_layers * w.dims.n_heads));
  int64_t rejected = 0;
  for (const TileRelevance& t : tiles) {
    // Pairs with m > 0: for each query i the keys j with i − j < w, j ≥ 0.
    int64_t window = 0;
    for (int64_t i = 0; i < T; ++i) window += std::min<int64_t>(i + 1, static_cast<int64_t>(std::ceil(t.w_used)));
    EXPECT_EQ(t.window_pairs, window) << t.layer << "/" << t.tile;
    EXPECT_LE(t.nonzero_pairs, t.window_pairs);
    rejected += t.window_pairs - t.nonzero_pairs;
    if (t.layer == 0 && t.tile == 1) {
      EXPECT_TRUE(t.pairs.empty());
      continue;
    }
    EXPECT_EQ(static_cast<int64_t>(t.pairs.size()), t.nonzero_pairs);
    for (const RelevancePair& p : t.pairs) {
      EXPECT_LE(p.j, p.i);
      EXPECT_LT(p.i - p.j, t.w_used);
      EXPECT_GT(p.alpha, 0.f);
      EXPECT_LE(p.alpha, 1.f);
      EXPECT_NEAR(p.mask, 0.5 * (std::cos(M_PI * (p.j - p.i) / t.w_used) + 1), 1e-6);
    }
  }
  EXPECT_GT(rejected, 0);  // Trim rejects a real fraction (s_r in [−1, 2])
}

TEST(ModelRunnerTest, DecodeLossesEqualTheFullPassAndPrefillIsTheLastArgmax) {
  const Weights w = TinyWeights(11);
  const int64_t T = 24, V = w.dims.vocab;
  const std::vector<int32_t> ids = testing::RandomTokens(V, T + 1, 13);
  InferenceOptions o;
  o.train_len = 6;
  ModelRunner runner(w, o);
  std::vector<float> full(T), decode(T);
  runner.TokenLossesFull(ids.data(), T + 1, full.data());
  runner.TokenLossesDecode(ids.data(), T + 1, decode.data());
  for (int64_t i = 0; i < T; ++i) EXPECT_NEAR(full[i], decode[i], 1e-4) << i;
  Multiscreen<float> model(w.dims, ShardSpec::Full(w.dims));
  std::vector<float> logits(T * V);
  model.Logits(w.params.data(), ids.data(), T, o, logits.data());
  const float* last = logits.data() + (T - 1) * V;
  EXPECT_EQ(runner.Prefill(ids.data(), T), std::max_element(last, last + V) - last);
}

class TransformerRunnerTest : public ::testing::TestWithParam<int> {};

TEST_P(TransformerRunnerTest, DecodeLossesEqualTheFullPassAndPrefillIsTheLastArgmax) {
  const int bits = GetParam();  // qk_norm, sio, pl_norm
  Weights w;
  w.dims = *LoadModel("tiny_transformer");
  w.dims.qk_norm = bits & 1;
  w.dims.sio = bits & 2;
  w.dims.pl_norm = bits & 4;
  const ParamLayout layout(w.dims, ShardSpec::Full(w.dims));
  w.params.resize(layout.size());
  InitParams(layout, 17 + bits, w.params.data());
  for (const ParamEntry& e : layout.entries()) {  // far from uniform predictions
    if (!e.is_gain() && !e.is_scalar()) {
      for (int64_t i = 0; i < e.size(); ++i) w.params[e.buffer_offset + i] *= 12;
    }
  }
  const int64_t T = 30, V = w.dims.vocab;
  const std::vector<int32_t> ids = testing::RandomTokens(V, T + 1, 19);
  ModelRunner runner(w, InferenceOptions{});
  std::vector<float> full(T), decode(T);
  runner.TokenLossesFull(ids.data(), T + 1, full.data());
  runner.TokenLossesDecode(ids.data(), T + 1, decode.data());
  for (int64_t i = 0; i < T; ++i) EXPECT_NEAR(full[i], decode[i], 1e-4) << i;
  auto decoder = MakeDecoder<float>(w.dims, w.params.data(), InferenceOptions{});
  std::vector<float> logits(V);
  for (int64_t i = 0; i < T; ++i) decoder->Step(ids[i], logits.data());
  EXPECT_EQ(runner.Prefill(ids.data(), T), std::max_element(logits.begin(), logits.end()) - logits.begin());
}

INSTANTIATE_TEST_SUITE_P(Switches, TransformerRunnerTest, ::testing::Range(0, 8));

}  // namespace
}  // namespace multiscreen::eval
