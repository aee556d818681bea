// Behaviour of the Multiscreen model: the spec's sanity figure, layout-independent
// initialization, windowed and trimmed relevance, decoding cache, bf16 path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/decode.h"
#include "model/decoder.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/screening.h"
#include "model/multiscreen.h"
#include "tests/model/test_model.h"

namespace multiscreen {
namespace {

using testing::PerturbedParams;
using testing::PerturbedTransformerParams;
using testing::RandomTokens;
using testing::TinyDims;

TEST(ModelTest, InitialLossOnRandomTokensMatchesTheSpecsSanityFigure) {
  auto dims = LoadModel("psi8");
  ASSERT_TRUE(dims.ok());
  Multiscreen<float> model(*dims, ShardSpec::Full(*dims));
  std::vector<float> p(model.layout().size());
  InitParams(model.layout(), 1, p.data());
  const int64_t B = 2, T = 64;
  const auto tokens = RandomTokens(dims->vocab, B * (T + 1), 5);
  const double loss = model.Loss(p.data(), tokens.data(), B, T);
  const double expected = std::log(std::exp(8.0) + 50256 * std::exp(0.5));  // ≈ 11.36
  EXPECT_NEAR(loss, expected, 0.1);
}

TEST(ModelTest, InitializationIsTheSameWhateverTheShard) {
  const ModelDims dims = TinyDims("tiny_psi4");
  const ParamLayout full(dims, ShardSpec::Full(dims));
  std::vector<float> whole(full.size());
  InitParams(full, 42, whole.data());
  ShardSpec shard = ShardSpec::Full(dims);
  shard.layer_begin = 2;
  shard.tile_begin = 1;
  shard.tile_end = 3;
  shard.vocab_begin = 50;
  const ParamLayout part(dims, shard);
  std::vector<float> mine(part.size());
  InitParams(part, 42, mine.data());
  for (const ParamEntry& e : part.entries()) {
    const ParamEntry* g = full.Find(e.name);
    ASSERT_NE(g, nullptr) << e.name;
    const int64_t inner = e.shape.empty() ? 1 : e.size() / e.shape[0];
    const int64_t skip = e.offset.empty() ? 0 : e.offset[0] * inner;
    for (int64_t i = 0; i < e.size(); ++i) {
      ASSERT_EQ(mine[e.buffer_offset + i], whole[g->buffer_offset + skip + i]) << e.name << "[" << i << "]";
    }
  }
  // And the spec's scalars: s_w spreads log(w_th)·h/(N_H − 1) over the tiles.
  const float* s_w = whole.data() + full.Find("layers/001/s_w")->buffer_offset;
  EXPECT_FLOAT_EQ(s_w[0], 0.0f);
  EXPECT_FLOAT_EQ(s_w[3], static_cast<float>(std::log(dims.w_th)));
  EXPECT_FLOAT_EQ(whole[full.Find("head/s_F")->buffer_offset], static_cast<float>(std::log(4.0)));
}

// One layer's screening on a single tile, from hand-made projections.
struct OneTile {
  kernels::cpu::ScreeningShape shape;
  std::vector<double> P, U, qt, kt, vb, qn, kn, vn, h;
  explicit OneTile(int64_t T) {
    shape.batch = 1;
    shape.seq = T;
    shape.tiles = 1;
    shape.d_k = 4;
    shape.d_v = 3;
    shape.w_th = 8;
    P.resize(T * shape.p_cols());
    U.resize(T * 3);
    qt.resize(T * 4);
    kt.resize(T * 4);
    vb.resize(T * 3);
    qn.resize(T);
    kn.resize(T);
    vn.resize(T);
    h.resize(T * 3);
    // Queries and keys nearly aligned (s close to 1, so Trim accepts them),
    // values and gates random.
    std::mt19937_64 rng(3);
    std::normal_distribution<double> n(0, 1);
    const double aligned[4] = {0.1, 0.1, 1.0, 1.0};
    for (int64_t t = 0; t < T; ++t) {
      double* row = P.data() + t * shape.p_cols();
      for (int c = 0; c < 8; ++c) row[c] = aligned[c % 4] + 0.01 * n(rng);
      for (int c = 8; c < shape.p_cols(); ++c) row[c] = n(rng);
    }
  }
  void Run(double w, double r) {
    kernels::cpu::TileScalars s{w, r, 1.0, w};
    kernels::cpu::ScreeningForward(shape, P.data(), &s,
                                   {qt.data(), kt.data(), vb.data(), qn.data(), kn.data(), vn.data(), h.data()}, U.data());
  }
};

TEST(ScreeningTest, KeysBeyondTheWindowGetZeroRelevance) {
  const int64_t T = 12, i = 10;
  OneTile tile(T);
  tile.Run(3.0, 0.999);  // ⌈w⌉ = 3 keys: distances 0, 1, 2
  const std::vector<double> before(tile.U.begin() + i * 3, tile.U.begin() + i * 3 + 3);
  ASSERT_NE(before[0], 0.0);
  // Change the key and value of position i − 3: outside the window.
  for (int c = 4; c < 4 + 4 + 3; ++c) tile.P[(i - 3) * tile.shape.p_cols() + c] += 1.0;
  tile.Run(3.0, 0.999);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(tile.U[i * 3 + c], before[c]);
  // Position i − 2 is inside: changing it changes the output.
  for (int c = 4; c < 4 + 4 + 3; ++c) tile.P[(i - 2) * tile.shape.p_cols() + c] += 1.0;
  tile.Run(3.0, 0.999);
  EXPECT_NE(tile.U[i * 3], before[0]);
}

TEST(ScreeningTest, TrimGivesExactlyZeroAtOrBelowTheThreshold) {
  const double q[2] = {1.0, 0.0};
  const double keys[4] = {0.6, 0.8, 0.8, 0.6};  // s = 0.6 and 0.8
  const double values[2] = {1.0, 1.0};
  const int64_t dist[2] = {0, 1};
  const double mask[2] = {1.0, 1.0};
  double h = -1;
  // r = 0.19: threshold 1 − r = 0.81, so both keys (s ≤ 0.81) are rejected exactly.
  kernels::cpu::ScreenOneQuery(q, keys, values, dist, 2, 2, 1, 0.19, mask, 2, &h);
  EXPECT_EQ(h, 0.0);
  // r = 0.3: the s = 0.8 key gets α = (1 − 0.2/0.3)² = 1/9.
  kernels::cpu::ScreenOneQuery(q, keys, values, dist, 2, 2, 1, 0.3, mask, 2, &h);
  EXPECT_NEAR(h, 1.0 / 9.0, 1e-12);
}

// Window expansion on and off; issue 30's ablation switches (position, output gate), and
// YaRN at inference for position ROPE (its frequencies, F = yarn_factor, L = train_len).
struct DecodeCase {
  bool expand_windows;
  kernels::PositionKind position = kernels::PositionKind::kMipe;
  bool output_gate = true;
  double yarn_factor = 1.0;
};

void PrintTo(const DecodeCase& c, std::ostream* os) {
  *os << (c.expand_windows ? "expand" : "as learned") << " position=" << kernels::PositionKindName(c.position)
      << (c.output_gate ? "" : " no gate") << (c.yarn_factor != 1.0 ? " yarn" : "");
}

class DecodeTest : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(DecodeTest, CachedTokenByTokenDecodingGivesTheFullForwardsLogits) {
  ModelDims dims = TinyDims("tiny_psi4");
  dims.position = GetParam().position;
  dims.output_gate = GetParam().output_gate;
  InferenceOptions options;
  options.expand_windows = GetParam().expand_windows;
  options.train_len = 8;  // tiles with w > 8 become infinite when expanding
  options.yarn_factor = GetParam().yarn_factor;
  Multiscreen<double> model(dims, ShardSpec::Full(dims));
  const auto p = PerturbedParams<double>(model.layout(), 21);
  const int64_t T = 30;
  const auto ids = RandomTokens(dims.vocab, T, 22);
  std::vector<double> full(T * dims.vocab), step(dims.vocab);
  model.Logits(p.data(), ids.data(), T, options, full.data());
  if (options.yarn_factor != 1.0) {  // YaRN really changes the forward (so decoding must follow it)
    InferenceOptions plain = options;
    plain.yarn_factor = 1.0;
    std::vector<double> unscaled(T * dims.vocab);
    model.Logits(p.data(), ids.data(), T, plain, unscaled.data());
    double moved = 0;
    for (int64_t n = 0; n < T * dims.vocab; ++n) moved = std::max(moved, std::abs(full[n] - unscaled[n]));
    EXPECT_GT(moved, 1e-3);
  }
  DecodeSession<double> session(dims, p.data(), options);
  int ring_tiles = 0;
  for (int64_t t = 0; t < T; ++t) {
    session.Step(ids[t], step.data());
    for (int64_t v = 0; v < dims.vocab; ++v) ASSERT_NEAR(step[v], full[t * dims.vocab + v], 1e-10) << t << "," << v;
  }
  for (int64_t l = 0; l < dims.n_layers; ++l) {
    for (int64_t h = 0; h < dims.n_heads; ++h) ring_tiles += session.CachedKeys(l, h) < T;
  }
  EXPECT_GT(ring_tiles, 0);  // some tiles really decode from a ring buffer shorter than T
}

INSTANTIATE_TEST_SUITE_P(Windows, DecodeTest,
                         ::testing::Values(DecodeCase{true}, DecodeCase{false},
                                           DecodeCase{true, kernels::PositionKind::kNope},
                                           DecodeCase{false, kernels::PositionKind::kRope},
                                           DecodeCase{true, kernels::PositionKind::kRope, false},
                                           DecodeCase{false, kernels::PositionKind::kMipe, false},
                                           DecodeCase{false, kernels::PositionKind::kRope, true, 4.0},
                                           DecodeCase{true, kernels::PositionKind::kRope, false, 2.5}),
                         [](const ::testing::TestParamInfo<DecodeCase>& info) {
                           const DecodeCase& c = info.param;
                           return std::string(c.expand_windows ? "Expand" : "AsLearned") + "_" +
                                  kernels::PositionKindName(c.position) + (c.output_gate ? "" : "_NoGate") +
                                  (c.yarn_factor != 1.0 ? "_Yarn" : "");
                         });

// Decoder::Feed takes a prompt in chunks of kFeedRows tokens (the layers' GEMMs over a
// chunk's rows, the caches stepped token by token): after a Feed of k tokens and a Step,
// the logits are those of k + 1 Steps, for k on both sides of the chunk boundaries and
// past them (fp64, both families; finite windows whose rings wrap many times); Losses
// over the whole sequence gives the log-softmax of each Step's logits at the next token.
TEST(ModelTest, APromptFedInChunksDecodesAsTokenByToken) {
  constexpr int64_t R = Decoder<double>::kFeedRows;
  for (const char* name : {"tiny_psi4", "tiny_transformer"}) {
    const ModelDims dims = TinyDims(name);
    const ParamLayout layout(dims, ShardSpec::Full(dims));
    const auto p = dims.transformer() ? PerturbedTransformerParams<double>(layout, 23) : PerturbedParams<double>(layout, 23);
    InferenceOptions options;
    options.train_len = 8;
    const auto ids = RandomTokens(dims.vocab, 2 * R + 9, 24);
    // The reference: Step by Step, the logits after every token.
    std::vector<std::vector<double>> want;
    auto stepped = MakeDecoder<double>(dims, p.data(), options);
    std::vector<double> logits(dims.vocab);
    for (int32_t id : ids) {
      stepped->Step(id, logits.data());
      want.push_back(logits);
    }
    for (int64_t k : {int64_t{0}, int64_t{1}, R - 1, R, R + 1, 2 * R + 8}) {
      auto fed = MakeDecoder<double>(dims, p.data(), options);
      fed->Feed(ids.data(), k);
      ASSERT_EQ(fed->position(), k);
      fed->Step(ids[k], logits.data());
      double worst = 0;
      for (int64_t v = 0; v < dims.vocab; ++v) worst = std::max(worst, std::abs(logits[v] - want[k][v]));
      EXPECT_LE(worst, 1e-12) << name << ": a Feed of " << k << " tokens";
    }
    // Losses: every token's loss at its successor, the chunks' heads batched, against the
    // log-softmax of the Steps' logits.
    const int64_t n = static_cast<int64_t>(ids.size());
    std::vector<double> want_losses(n - 1);
    for (int64_t i = 0; i + 1 < n; ++i) {
      const double m = *std::max_element(want[i].begin(), want[i].end());
      double sum = 0;
      for (double z : want[i]) sum += std::exp(z - m);
      want_losses[i] = m + std::log(sum) - want[i][ids[i + 1]];
    }
    auto scored = MakeDecoder<double>(dims, p.data(), options);
    std::vector<float> losses(n - 1, -1.f);
    scored->Losses(ids.data(), n, losses.data());
    EXPECT_EQ(scored->position(), n);
    double worst = 0;
    for (int64_t i = 0; i + 1 < n; ++i) worst = std::max(worst, std::abs(double(losses[i]) - want_losses[i]) / want_losses[i]);
    EXPECT_LE(worst, 1e-6) << name << ": Losses (float) against the Steps' logits";
    EXPECT_GT(want_losses[0], 0.1);
  }
}

TEST(ModelTest, WindowExpansionOnlyChangesTilesLongerThanTheTrainingLength) {
  const ModelDims dims = TinyDims("tiny_psi4");
  Multiscreen<double> model(dims, ShardSpec::Full(dims));
  const auto p = PerturbedParams<double>(model.layout(), 21);
  const int64_t T = 16;
  const auto ids = RandomTokens(dims.vocab, T, 23);
  std::vector<double> learned(T * dims.vocab), expanded_far(T * dims.vocab), expanded_near(T * dims.vocab);
  model.Logits(p.data(), ids.data(), T, {false, 8}, learned.data());
  model.Logits(p.data(), ids.data(), T, {true, 1 << 20}, expanded_far.data());  // no tile exceeds 2^20
  model.Logits(p.data(), ids.data(), T, {true, 8}, expanded_near.data());
  EXPECT_EQ(learned, expanded_far);
  EXPECT_NE(learned, expanded_near);
}

TEST(ModelTest, Bf16PathStaysCloseToFp32) {
  const ModelDims dims = TinyDims("tiny_psi4");
  ModelOptions bf16;
  bf16.precision = Precision::kBf16;
  Multiscreen<float> fp32_model(dims, ShardSpec::Full(dims));
  Multiscreen<float> bf16_model(dims, ShardSpec::Full(dims), bf16);
  const auto p = PerturbedParams<float>(fp32_model.layout(), 31);
  const int64_t B = 2, T = 16;
  const auto tokens = RandomTokens(dims.vocab, B * (T + 1), 32);
  std::vector<float> g32(p.size(), 0.f), g16(p.size(), 0.f);
  const double l32 = fp32_model.ForwardBackward(p.data(), tokens.data(), B, T, g32.data());
  const double l16 = bf16_model.ForwardBackward(p.data(), tokens.data(), B, T, g16.data());
  EXPECT_NE(l32, l16);  // the bf16 compute copies are really used
  EXPECT_NEAR(l16, l32, 2e-2 * l32);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    diff += (g16[i] - g32[i]) * double(g16[i] - g32[i]);
    norm += g32[i] * double(g32[i]);
  }
  EXPECT_LT(std::sqrt(diff / norm), 5e-2);
}

// Issue 44: on a CPU with bf16 dot products the bf16 step runs them (oneDNN, bf16 operands,
// fp32 sums); capped to avx2 the same step is emulated (fp32 products of the same
// bf16-rounded operands). The two differ only in the sums' order, so they agree far closer
// than bf16 and fp32 do: an operand rounded on one path and not the other would not (the
// head's numerators, rounded for the dot products alone, put a layer's 0.3 apart; fp32
// backward gradients on the emulated path alone, 0.03 to 0.3).
TEST(ModelTest, Bf16StepOnTheDotProductsIsTheEmulatedBf16Step) {
  if (!kernels::cpu::Bf16GemmAvailable()) GTEST_SKIP() << "no bf16 dot products on this CPU's path";
  const ModelDims dims = TinyDims("tiny_psi4");
  ModelOptions bf16;
  bf16.precision = Precision::kBf16;
  Multiscreen<float> fp32_model(dims, ShardSpec::Full(dims));
  const auto p = PerturbedParams<float>(fp32_model.layout(), 31);
  const int64_t B = 2, T = 16;
  const auto tokens = RandomTokens(dims.vocab, B * (T + 1), 32);
  std::vector<float> g32(p.size(), 0.f), g_dot(p.size(), 0.f), g_emulated(p.size(), 0.f);
  const double l32 = fp32_model.ForwardBackward(p.data(), tokens.data(), B, T, g32.data());
  double l_dot = 0, l_emulated = 0;
  {
    Multiscreen<float> model(dims, ShardSpec::Full(dims), bf16);
    l_dot = model.ForwardBackward(p.data(), tokens.data(), B, T, g_dot.data());
  }
  const kernels::cpu::Isa isa = kernels::cpu::ActiveIsa();
  ASSERT_TRUE(kernels::cpu::SetIsaCap(kernels::cpu::Isa::kAvx2).ok());
  {
    Multiscreen<float> model(dims, ShardSpec::Full(dims), bf16);
    l_emulated = model.ForwardBackward(p.data(), tokens.data(), B, T, g_emulated.data());
  }
  ASSERT_TRUE(kernels::cpu::SetIsaCap(isa).ok());
  EXPECT_LT(std::abs(l_dot - l_emulated), 0.01 * std::abs(l_dot - l32));
  // Each parameter tensor's gradient (all together, Ē's would hide the layers').
  for (const ParamEntry& e : fp32_model.layout().entries()) {
    auto distance = [&](const std::vector<float>& a, const std::vector<float>& b) {
      double d = 0;
      for (int64_t i = e.buffer_offset; i < e.buffer_offset + e.size(); ++i) d += (a[i] - b[i]) * double(a[i] - b[i]);
      return std::sqrt(d);
    };
    EXPECT_LT(distance(g_dot, g_emulated), 0.05 * distance(g_dot, g32)) << e.name;  // at most 0.024 seen (s_E)
  }
  EXPECT_NE(g_dot, g_emulated);  // the dot products did run
}

TEST(ModelTest, Fp32AgreesWithFp64) {
  const ModelDims dims = TinyDims("tiny_psi4");
  Multiscreen<float> m32(dims, ShardSpec::Full(dims));
  Multiscreen<double> m64(dims, ShardSpec::Full(dims));
  const auto p64 = PerturbedParams<double>(m64.layout(), 41);
  const std::vector<float> p32(p64.begin(), p64.end());
  const int64_t B = 2, T = 20;
  const auto tokens = RandomTokens(dims.vocab, B * (T + 1), 42);
  std::vector<float> g32(p32.size(), 0.f);
  std::vector<double> g64(p64.size(), 0.0);
  const double l32 = m32.ForwardBackward(p32.data(), tokens.data(), B, T, g32.data());
  const double l64 = m64.ForwardBackward(p64.data(), tokens.data(), B, T, g64.data());
  EXPECT_NEAR(l32, l64, 1e-5 * l64);
  for (const ParamEntry& e : m64.layout().entries()) {
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < e.size(); ++i) {
      const double a = g32[e.buffer_offset + i], b = g64[e.buffer_offset + i];
      diff += (a - b) * (a - b);
      norm += b * b;
    }
    // The floor covers tensors whose gradient is ~0 (every pair of a tile
    // rejected): there fp32 rounding alone decides borderline pairs.
    EXPECT_LT(std::sqrt(diff), 1e-4 * std::sqrt(norm) + 1e-6) << e.name;
  }
}

}  // namespace
}  // namespace multiscreen
