// The Transformer baseline (model/transformer.h): every parameter's gradient against
// central finite differences in double precision, for every combination of the switches
// qk_norm, sio, pl_norm and the attention mechanisms (issue 30); its initialization (spec "Transformer baseline"); a pipeline of
// two stages pieces equal to the whole model; fp16's backward holding its GEMM gradients
// in fp16; the kernel factory's CUDA refusals; decoding with the KV cache equal to the full forward (issue 18).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <string_view>

#include "kernels/kernel_table.h"
#include "kernels/transformer_kernels.h"
#include "model/decoder.h"
#include "model/init.h"
#include "model/model_stage.h"
#include "model/transformer.h"
#include "tests/model/test_model.h"

namespace multiscreen {
namespace {

using testing::RandomTokens;

ModelDims TinyTransformer(bool qk_norm, bool sio, bool pl_norm, AttentionKind attention = AttentionKind::kSoftmax,
                          SigmoidBias sigmoid_bias = SigmoidBias::kTrainLength) {
  ModelDims d = *LoadModel("tiny_transformer");
  d.qk_norm = qk_norm;
  d.sio = sio;
  d.pl_norm = pl_norm;
  d.attention = attention;
  d.sigmoid_bias = sigmoid_bias;
  return d;
}

struct Switches {
  bool qk_norm, sio, pl_norm;
  AttentionKind attention = AttentionKind::kSoftmax;  // issue 30's mechanisms
  SigmoidBias sigmoid_bias = SigmoidBias::kTrainLength;  // attention SIGMOID's (issue 43)
};

// How a case shows in gtest's output, and its name: the switches that are on.
void PrintTo(const Switches& s, std::ostream* os) {
  *os << "qk_norm " << s.qk_norm << ", sio " << s.sio << ", pl_norm " << s.pl_norm << ", attention "
      << AttentionKindName(s.attention) << ", sigmoid_bias " << SigmoidBiasName(s.sigmoid_bias);
}
std::string SwitchesName(const ::testing::TestParamInfo<Switches>& info) {
  const Switches& s = info.param;
  std::string name = std::string(s.qk_norm ? "QkNorm" : "") + (s.sio ? "Sio" : "") + (s.pl_norm ? "PlNorm" : "");
  if (name.empty()) name = "Plain";
  if (s.attention != AttentionKind::kSoftmax) name += std::string("_") + AttentionKindName(s.attention);
  if (s.sigmoid_bias != SigmoidBias::kTrainLength) name += std::string("_") + SigmoidBiasName(s.sigmoid_bias);
  return name;
}

// The switch cases, then every other attention mechanism plain and SSMax with qk_norm
// (its s_SS and s_QK both scale the scores); screening plain and with sio and pl_norm (its
// heads: w ≈ 2 with MiPE turning, and w ≈ 257 past w_th, MiPE off); sigmoid with each bias.
const Switches kCases[] = {
    Switches{false, false, false}, Switches{true, false, false}, Switches{false, true, false},
    Switches{false, false, true},  Switches{true, true, true},
    Switches{false, false, false, AttentionKind::kSoftmax1}, Switches{false, false, false, AttentionKind::kSsmax},
    Switches{true, true, false, AttentionKind::kSsmax},      Switches{false, false, false, AttentionKind::kSigmoid},
    Switches{false, false, false, AttentionKind::kEntmax15}, Switches{false, false, false, AttentionKind::kScreening},
    Switches{false, true, true, AttentionKind::kScreening},
    Switches{false, false, false, AttentionKind::kSigmoid, SigmoidBias::kPerQuery}};

class TransformerGradientTest : public ::testing::TestWithParam<Switches> {};

TEST_P(TransformerGradientTest, EveryParameterMatchesCentralDifferences) {
  const Switches s = GetParam();
  const ModelDims dims = TinyTransformer(s.qk_norm, s.sio, s.pl_norm, s.attention, s.sigmoid_bias);
  auto model = MakeModelStage<double>(dims, ShardSpec::Full(dims));
  ASSERT_NE(dynamic_cast<Transformer<double>*>(model.get()), nullptr);
  const ParamLayout& layout = model->layout();
  std::vector<double> p = testing::PerturbedTransformerParams<double>(layout, 21);
  const int64_t B = 2, T = 9;
  const auto tokens = RandomTokens(dims.vocab, B * (T + 1), 22);
  std::vector<double> grads(layout.size(), 0.0);
  const double loss = model->ForwardBackward(p.data(), tokens.data(), B, T, grads.data());
  EXPECT_TRUE(std::isfinite(loss));
  const double h = 1e-6;
  int checked = 0;
  for (const ParamEntry& e : layout.entries()) {
    const int64_t stride = e.is_scalar() || e.is_gain() ? 1 : e.kind == ParamKind::kW_E ? 11 : 3;
    for (int64_t i = 0; i < e.size(); i += stride) {
      double& x = p[e.buffer_offset + i];
      const double saved = x;
      x = saved + h;
      const double up = model->Loss(p.data(), tokens.data(), B, T);
      x = saved - h;
      const double down = model->Loss(p.data(), tokens.data(), B, T);
      x = saved;
      const double fd = (up - down) / (2 * h);
      EXPECT_NEAR(grads[e.buffer_offset + i], fd, 2e-7 + 1e-5 * std::abs(fd)) << e.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 300);
}

INSTANTIATE_TEST_SUITE_P(AllSwitches, TransformerGradientTest, ::testing::ValuesIn(kCases), SwitchesName);

TEST(TransformerInitTest, FollowsTheSpecStdsAndScalesResidualOutputs) {
  ModelDims dims = *LoadModel("transformer_8m");
  dims.qk_norm = dims.sio = true;
  dims.attention = AttentionKind::kSsmax;
  const ParamLayout layout(dims, ShardSpec::Full(dims));
  std::vector<float> p(layout.size());
  InitParams(layout, 5, p.data());
  auto std_of = [&](const char* name) {
    const ParamEntry* e = layout.Find(name);
    double sq = 0;
    for (int64_t i = 0; i < e->size(); ++i) sq += double(p[e->buffer_offset + i]) * p[e->buffer_offset + i];
    return std::sqrt(sq / double(e->size()));
  };
  EXPECT_NEAR(std_of("embed/W_E"), 0.02, 2e-4);
  EXPECT_NEAR(std_of("layers/002/W_Q"), 0.02, 5e-4);
  EXPECT_NEAR(std_of("layers/002/W_gate"), 0.02, 5e-4);
  EXPECT_NEAR(std_of("layers/002/W_O"), 0.02 / std::sqrt(12.0), 2e-4);    // 1/√(2 N_L), N_L = 6
  EXPECT_NEAR(std_of("layers/002/W_down"), 0.02 / std::sqrt(12.0), 2e-4);
  EXPECT_EQ(p[layout.Find("layers/000/attn_norm")->buffer_offset + 17], 1.0f);
  EXPECT_FLOAT_EQ(p[layout.Find("layers/005/s_QK")->buffer_offset + 3], std::log(std::sqrt(32.0f)));
  EXPECT_EQ(p[layout.Find("layers/005/s_SS")->buffer_offset + 3], 1.0f);  // SSMax's s (docs/attention.md)
  EXPECT_EQ(p[layout.Find("embed/s_E")->buffer_offset], 0.0f);
  EXPECT_FLOAT_EQ(p[layout.Find("head/s_F")->buffer_offset], std::log(std::sqrt(128.0f)));
}

TEST(TransformerModelTest, TwoStagesOfLayersEqualTheWholeModel) {
  const ModelDims dims = TinyTransformer(true, true, false);
  const ParamLayout full(dims, ShardSpec::Full(dims));
  const std::vector<double> p = testing::PerturbedTransformerParams<double>(full, 31);
  const int64_t B = 2, T = 7, rows = B * T;
  const auto tokens = RandomTokens(dims.vocab, B * (T + 1), 32);
  auto whole = MakeModelStage<double>(dims, ShardSpec::Full(dims));
  std::vector<double> g_whole(full.size(), 0.0);
  const double loss = whole->ForwardBackward(p.data(), tokens.data(), B, T, g_whole.data());

  // Stage 0: embed + layer 0; stage 1: layer 1 + head; parameters copied by name.
  ShardSpec s0 = ShardSpec::ForRank(dims, 1, 2, 0, 0), s1 = ShardSpec::ForRank(dims, 1, 2, 0, 1);
  auto m0 = MakeModelStage<double>(dims, s0), m1 = MakeModelStage<double>(dims, s1);
  auto slice = [&](const ParamLayout& l) {
    std::vector<double> v(l.size());
    for (const ParamEntry& e : l.entries()) {
      std::copy_n(p.data() + full.Find(e.name)->buffer_offset, e.size(), v.data() + e.buffer_offset);
    }
    return v;
  };
  const auto p0 = slice(m0->layout()), p1 = slice(m1->layout());
  std::vector<double> g0(p0.size(), 0.0), g1(p1.size(), 0.0), x(rows * dims.d_e), dx(rows * dims.d_e);
  std::vector<int32_t> in(rows), tgt(rows);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) in[b * T + t] = tokens[b * (T + 1) + t], tgt[b * T + t] = tokens[b * (T + 1) + t + 1];
  }
  m0->BeginStep(p0.data());
  m1->BeginStep(p1.data());
  m0->Embed(p0.data(), in.data(), rows, x.data());
  m0->LayersForward(p0.data(), B, T, x.data());
  m1->LayersForward(p1.data(), B, T, x.data());
  EXPECT_EQ(m1->HeadLoss(p1.data(), x.data(), tgt.data(), rows, dx.data(), g1.data(), 1.0, nullptr), loss);
  m1->LayersBackward(p1.data(), dx.data(), g1.data());
  m0->LayersBackward(p0.data(), dx.data(), g0.data());
  m0->EmbedBackward(p0.data(), in.data(), rows, dx.data(), g0.data());
  m0->EndStep(g0.data());
  m1->EndStep(g1.data());
  for (const auto* part : {&m0->layout(), &m1->layout()}) {
    const auto& g = part == &m0->layout() ? g0 : g1;
    for (const ParamEntry& e : part->entries()) {
      if (e.kind == ParamKind::kW_E) continue;  // summed between the stages below
      for (int64_t i = 0; i < e.size(); ++i) {
        EXPECT_EQ(g[e.buffer_offset + i], g_whole[full.Find(e.name)->buffer_offset + i]) << e.name;
      }
    }
  }
  const int64_t w0 = m0->layout().Find("embed/W_E")->buffer_offset, w1 = m1->layout().Find("embed/W_E")->buffer_offset;
  const int64_t wf = full.Find("embed/W_E")->buffer_offset;
  for (int64_t i = 0; i < dims.vocab * dims.d_e; ++i) {
    EXPECT_NEAR(g0[w0 + i] + g1[w1 + i], g_whole[wf + i], 1e-14 * (1 + std::abs(g_whole[wf + i])));
  }
}

// The Transformer kernels of a device: the CPU's always; CUDA's (fp32) where the build has
// CUDA and a device is visible, else the same one-line refusal as the kernel table's.
TEST(TransformerKernelsFactoryTest, CudaGivesTheKernelTablesRefusalsWhereItCannotRun) {
  auto cpu = MakeTransformerKernels<float>(Device::kCpu);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->device(), Device::kCpu);
  auto f32 = MakeTransformerKernels<float>(Device::kCuda);
  auto table = MakeKernelTable<float>(Device::kCuda);
  EXPECT_EQ(f32.ok(), table.ok());
  if (f32.ok()) {
    EXPECT_EQ((*f32)->device(), Device::kCuda);
  } else {
    EXPECT_EQ(f32.status(), table.status());
    EXPECT_EQ(f32.status().message().find('\n'), std::string_view::npos);
    std::printf("MakeTransformerKernels<float>(cuda): %s\n", std::string(f32.status().message()).c_str());
  }
  auto f64 = MakeTransformerKernels<double>(Device::kCuda);  // never: the GPU path is fp32
  ASSERT_FALSE(f64.ok());
  EXPECT_EQ(f64.status(), MakeKernelTable<double>(Device::kCuda).status());
#ifdef MULTISCREEN_HAVE_CUDA
  EXPECT_NE(f64.status().message().find("fp64"), std::string_view::npos) << f64.status();
#endif
}

// Issue 18's fp16 backward, as Multiscreen's (model/multiscreen.h): under fp16 the
// backward GEMMs' gradient operands are held in fp16, so a loss scale that takes them
// past fp16's largest value (65504) overflows the gradients to ±inf — what the trainer's
// dynamic loss scaling detects and skips — while fp32 and bf16 at that scale stay finite;
// at a moderate scale the fp16 gradients agree with fp32's to 16-bit precision. (The
// CPU's GEMM computes on the values it is given, so without the rounding the fp16 run
// would never overflow and the GPU's, whose GEMMs convert to fp16, would differ.)
TEST(TransformerPrecisionTest, Fp16BackwardHoldsTheGemmGradientsInFp16) {
  for (const Switches s : {Switches{false, false, false}, Switches{true, true, true}}) {
    const ModelDims dims = TinyTransformer(s.qk_norm, s.sio, s.pl_norm);
    const ParamLayout layout(dims, ShardSpec::Full(dims));
    const std::vector<float> p = testing::PerturbedTransformerParams<float>(layout, 51);
    const int64_t B = 2, T = 9;
    const auto tokens = RandomTokens(dims.vocab, B * (T + 1), 52);
    auto grads_of = [&](Precision precision, double grad_scale) {
      ModelOptions options;
      options.precision = precision;
      auto model = MakeModelStage<float>(dims, ShardSpec::Full(dims), options);
      std::vector<float> g(layout.size(), 0.f);
      model->ForwardBackward(p.data(), tokens.data(), B, T, g.data(), nullptr, grad_scale);
      return g;
    };
    auto all_finite = [](const std::vector<float>& g) {
      return std::all_of(g.begin(), g.end(), [](float x) { return std::isfinite(x); });
    };
    const double huge = 1e12;  // dx·1e12 is far past 65504, far below fp32's and bf16's range
    EXPECT_TRUE(all_finite(grads_of(Precision::kFp32, huge)));
    EXPECT_TRUE(all_finite(grads_of(Precision::kBf16, huge)));
    EXPECT_FALSE(all_finite(grads_of(Precision::kFp16, huge))) << "fp16 gradients never overflowed";
    const double scale = 1024;
    const std::vector<float> g16 = grads_of(Precision::kFp16, scale), g32 = grads_of(Precision::kFp32, scale);
    ASSERT_TRUE(all_finite(g16));
    double diff = 0, ref = 0;
    for (size_t i = 0; i < g32.size(); ++i) {
      diff += (double(g16[i]) - g32[i]) * (double(g16[i]) - g32[i]);
      ref += double(g32[i]) * g32[i];
    }
    EXPECT_LE(std::sqrt(diff / ref), 1e-2);
    EXPECT_GT(std::sqrt(diff / ref), 0.0);  // 16-bit compute did happen
  }
}


// Issue 18: `generate`'s KV cache. Each step's logits equal the last row of the whole
// model's forward over the prefix (recomputed from scratch for every prefix): every
// logit z_v is read off the full forward as lse − loss(target v), so the head is not
// reimplemented here. T = 70 crosses the attention kernel's 64-key block.
class TransformerDecodeTest : public ::testing::TestWithParam<Switches> {};

TEST_P(TransformerDecodeTest, EveryStepEqualsTheFullForwardOverItsPrefix) {
  const Switches s = GetParam();
  const ModelDims dims = TinyTransformer(s.qk_norm, s.sio, s.pl_norm, s.attention, s.sigmoid_bias);
  auto model = MakeModelStage<double>(dims, ShardSpec::Full(dims));
  const std::vector<double> p = testing::PerturbedTransformerParams<double>(model->layout(), 41);
  const int64_t T = 70, V = dims.vocab, dE = dims.d_e;
  const auto ids = RandomTokens(V, T, 42);
  // Both at inference with the same options (sigmoid's bias: −log train_len, 4096, for
  // every prefix; the training forward's would be −log n).
  const InferenceOptions options;
  auto decoder = MakeDecoder<double>(dims, p.data(), options);
  std::vector<double> logits(V), x, losses(T);
  std::vector<int32_t> targets(T);
  double worst = 0;
  for (int64_t n = 1; n <= T; ++n) {
    decoder->Step(ids[n - 1], logits.data());
    ASSERT_EQ(decoder->position(), n);
    if (n % 7 != 0 && n > 3 && n != T) continue;  // the full forward at every 7th prefix (and the ends)
    x.assign(n * dE, 0.0);
    model->BeginStep(p.data());
    model->Embed(p.data(), ids.data(), n, x.data());
    model->LayersForward(p.data(), 1, n, x.data(), &options);
    // loss_i(v) = lse_i − z_i[v] for the last row i = n − 1; z_v = lse − loss(v).
    std::vector<double> z(V);
    for (int64_t v = 0; v < V; ++v) {
      std::fill(targets.begin(), targets.begin() + n, static_cast<int32_t>(v));
      model->HeadLoss(p.data(), x.data(), targets.data(), n, nullptr, nullptr, 1.0, losses.data());
      z[v] = -losses[n - 1];  // log p(v) = z_v − lse
    }
    const double m = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (double l : logits) sum += std::exp(l - m);
    const double lse = m + std::log(sum);
    for (int64_t v = 0; v < V; ++v) {
      const double err = std::abs((logits[v] - lse) - z[v]);
      worst = std::max(worst, err);
      ASSERT_NEAR(logits[v] - lse, z[v], 1e-10) << "prefix " << n << ", token " << v;
    }
  }
  std::printf("worst |log p| difference, decode vs full forward: %.3g\n", worst);
}

INSTANTIATE_TEST_SUITE_P(Switches, TransformerDecodeTest, ::testing::ValuesIn(kCases), SwitchesName);

// Sigmoid's bias n (issue 43, model/tile_weights.h SigmoidBiasLength): at training the
// sequence length T; at inference train_len, or options.sigmoid_bias_length when given; the
// per-query form ignores both. Each against the training forward's token losses.
TEST(TransformerSigmoidBiasTest, IsTheTrainingLengthUnlessInferenceSaysOtherwise) {
  const int64_t B = 1, T = 24;
  auto losses = [&](SigmoidBias bias, const InferenceOptions* inference) {
    const ModelDims dims = TinyTransformer(false, false, false, AttentionKind::kSigmoid, bias);
    auto model = MakeModelStage<double>(dims, ShardSpec::Full(dims));
    const std::vector<double> p = testing::PerturbedTransformerParams<double>(model->layout(), 51);
    const auto ids = RandomTokens(dims.vocab, B * (T + 1), 52);
    std::vector<int32_t> in(ids.begin(), ids.begin() + T), targets(ids.begin() + 1, ids.end());
    std::vector<double> x(B * T * dims.d_e), out(B * T);
    model->BeginStep(p.data());
    model->Embed(p.data(), in.data(), B * T, x.data());
    model->LayersForward(p.data(), B, T, x.data(), inference);
    model->HeadLoss(p.data(), x.data(), targets.data(), B * T, nullptr, nullptr, 1.0, out.data());
    return out;
  };
  const std::vector<double> training = losses(SigmoidBias::kTrainLength, nullptr);
  InferenceOptions at_train_len;
  at_train_len.train_len = T;
  EXPECT_EQ(losses(SigmoidBias::kTrainLength, &at_train_len), training);  // −log T both
  InferenceOptions longer = at_train_len;
  longer.sigmoid_bias_length = 4 * T;  // −log 4T: every query's weights smaller
  InferenceOptions other_train_len;
  other_train_len.train_len = 4 * T;
  const std::vector<double> scaled = losses(SigmoidBias::kTrainLength, &longer);
  EXPECT_EQ(losses(SigmoidBias::kTrainLength, &other_train_len), scaled);
  double moved = 0;
  for (int64_t i = 0; i < T; ++i) moved = std::max(moved, std::abs(scaled[i] - training[i]));
  EXPECT_GT(moved, 1e-3);
  // Per query: one result whatever the options, and another than the constant bias's.
  const std::vector<double> per_query = losses(SigmoidBias::kPerQuery, nullptr);
  EXPECT_EQ(losses(SigmoidBias::kPerQuery, &longer), per_query);
  EXPECT_NE(per_query, training);
}

// The screening attention's shape (model/tile_weights.h), the one its forward, backward and
// decoder share: the heads as tiles of width d_h = d_E / N_H, the model's w_th, MiPE,
// TanhNorm, no output gate (P holds 3 d_h columns per head) and no RoPE, whatever
// Multiscreen switches the model's dims carry.
TEST(TransformerScreeningShapeTest, HeadsAreUngatedMipeTilesOfTheHeadWidth) {
  ModelDims dims = TinyTransformer(false, false, false, AttentionKind::kScreening);
  dims.w_th = 37;
  dims.tanh_norm = false;  // Multiscreen's switches: not the Transformer's to read
  dims.position = kernels::PositionKind::kRope;
  dims.output_gate = true;
  const kernels::ScreeningShape s = TransformerScreeningShape(dims, 2, 3, 5);
  EXPECT_EQ(s.batch, 3);
  EXPECT_EQ(s.seq, 5);
  EXPECT_EQ(s.tiles, 2);
  EXPECT_EQ(s.d_k, dims.d_e / dims.n_heads);
  EXPECT_EQ(s.d_v, dims.d_e / dims.n_heads);
  EXPECT_EQ(s.w_th, 37.0);
  EXPECT_TRUE(s.tanh_norm);
  EXPECT_EQ(s.position, kernels::PositionKind::kMipe);
  EXPECT_FALSE(s.output_gate);
  EXPECT_EQ(s.p_cols(), 3 * dims.d_e / dims.n_heads);
  EXPECT_FALSE(s.rope_scaling.active());
}

// Greedy decoding with the cache picks, at every step, the argmax of the full forward
// over the prefix (fp32, the model `generate` runs).
TEST(TransformerDecodeTest, GreedyTokensAreTheFullForwardsArgmax) {
  const ModelDims dims = TinyTransformer(false, false, false);
  auto model = MakeModelStage<float>(dims, ShardSpec::Full(dims));
  const std::vector<double> p64 = testing::PerturbedTransformerParams<double>(model->layout(), 51);
  const std::vector<float> p(p64.begin(), p64.end());
  const std::vector<int32_t> prompt = {3, 14, 15, 9, 2, 6};
  auto decoder = MakeDecoder<float>(dims, p.data(), InferenceOptions{});
  const std::vector<int32_t> got = GreedyContinuation(*decoder, prompt, 20);
  ASSERT_EQ(got.size(), 20u);
  std::vector<int32_t> seq = prompt;
  for (int32_t next : got) {
    const int64_t n = static_cast<int64_t>(seq.size()), V = dims.vocab;
    std::vector<float> x(n * dims.d_e), losses(n);
    std::vector<int32_t> targets(n);
    model->BeginStep(p.data());
    model->Embed(p.data(), seq.data(), n, x.data());
    model->LayersForward(p.data(), 1, n, x.data());
    int32_t best = 0;
    float best_loss = INFINITY;
    for (int64_t v = 0; v < V; ++v) {  // argmax z = argmin loss(v)
      std::fill(targets.begin(), targets.end(), static_cast<int32_t>(v));
      model->HeadLoss(p.data(), x.data(), targets.data(), n, nullptr, nullptr, 1.0, losses.data());
      if (losses[n - 1] < best_loss) best_loss = losses[n - 1], best = static_cast<int32_t>(v);
    }
    EXPECT_EQ(next, best) << "after " << n << " tokens";
    seq.push_back(next);
  }
}

}  // namespace
}  // namespace multiscreen
