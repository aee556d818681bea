// YaRN at inference (issue 30): the NTK-by-parts frequencies and the logit scale of
// kernels/cpu/rope.h against values worked by hand, F = 1 against the plain RoPE formula
// bit for bit, the authors' code's ramp against their reference's values (issue 43), and
// the --yarn_factor and --yarn_ramp flags (eval/yarn.h). The models with YaRN against an
// independent PyTorch YaRN: yarn_cli_test.py.
#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "absl/strings/str_cat.h"
#include "eval/yarn.h"
#include "gtest/gtest.h"
#include "kernels/cpu/rope.h"

namespace multiscreen {
namespace {

using kernels::cpu::Rope;
using kernels::cpu::RopeFrequencies;
using kernels::cpu::RopeScaling;
using kernels::cpu::YarnLogitScale;

// d_h = 8, L = 1000, F = 4: θ_p = 10⁴^(−p/4) = 1, 0.1, 0.01, 0.001; r_p = L θ_p / 2π =
// 159.15, 15.915, 1.5915, 0.15915; γ = clamp((r − 1)/31, 0, 1) = 1, 0.481145, 0.0190822, 0;
// θ'_p = θ_p (1/4 + 3γ/4) = 1, 0.1 · 0.610859, 0.01 · 0.264312, 0.001/4.
TEST(YarnTest, FrequenciesFollowTheNtkByPartsRamp) {
  std::vector<double> freq(4);
  RopeFrequencies(8, RopeScaling{4.0, 1000.0}, freq.data());
  EXPECT_DOUBLE_EQ(freq[0], 1.0);  // turns 159 times in L: left alone
  EXPECT_NEAR(freq[1], 0.0610859, 1e-7);
  EXPECT_NEAR(freq[2], 0.00264312, 1e-8);
  EXPECT_DOUBLE_EQ(freq[3], 0.00025);  // turns 0.16 times in L: interpolated, θ/F
  RopeFrequencies(8, RopeScaling{}, freq.data());
  EXPECT_EQ(freq[1], std::pow(10000.0, -2.0 / 8.0));
}

// The authors' code's ramp (YarnRamp::kCode) against the values of a Python transcription
// of their reference (jquesnelle/yarn scaled_rope/LlamaYaRNScaledRotaryEmbedding.py:
// find_correction_dim, find_correction_range with math.floor/ceil, linear_ramp_mask over the
// pair index, inv_freq = inv_freq_interpolation (1 − mask) + inv_freq_extrapolation mask,
// mask = 1 − ramp), evaluated in float64 for d_h 64, L 4096, F 4, beta_fast 32, beta_slow
// 1: correction range [10, 23]. Not computed from this code.
TEST(YarnTest, TheCodeRampGivesTheReferenceCodesFrequencies) {
  const double want[32] = {
      1.0, 0.7498942093324559, 0.5623413251903491, 0.4216965034285823,
      0.31622776601683794, 0.23713737056616555, 0.17782794100389226, 0.1333521432163324,
      0.1, 0.07498942093324558, 0.056234132519034905, 0.039736785900001015,
      0.02797399468610489, 0.01960943641220215, 0.013679072384914791, 0.009488517882700576,
      0.006538461538461538, 0.00447052317102041, 0.0030279917510249565, 0.002027387035714338,
      0.0013378867023789293, 0.000866463469376374, 0.0005471628953965916, 0.000333380358040831,
      0.00025, 0.00018747355233311394, 0.00014058533129758727, 0.00010542412585714557,
      7.905694150420948e-05, 5.9284342641541385e-05, 4.445698525097307e-05, 3.33380358040831e-05};
  RopeScaling code{4.0, 4096.0};
  code.ramp = kernels::cpu::YarnRamp::kCode;
  std::vector<double> got(32), paper(32);
  RopeFrequencies(64, code, got.data());
  RopeFrequencies(64, RopeScaling{4.0, 4096.0}, paper.data());
  int differ = 0;
  for (int p = 0; p < 32; ++p) {
    EXPECT_NEAR(got[p], want[p], 1e-14 * want[p]) << "pair " << p;
    differ += std::abs(paper[p] / got[p] - 1) > 0.01;
  }
  // The paper's ramp (linear in r) agrees outside the range and differs inside: pairs 11–22.
  EXPECT_EQ(differ, 12);
  EXPECT_NEAR(got[17] / paper[17], 1.7326, 1e-4);  // the largest difference
}

// --yarn_ramp: paper or code; code needs YaRN on.
TEST(YarnTest, TheRampFlagTakesPaperOrCodeAndCodeOnlyWithAFactor) {
  ModelDims transformer;
  transformer.family = ModelFamily::kTransformer;
  const eval::YarnFlag on = eval::ParseYarnFactor("4", transformer).value();
  const eval::YarnFlag off = eval::ParseYarnFactor("1", transformer).value();
  EXPECT_EQ(eval::ParseYarnRamp("paper", off).value(), kernels::cpu::YarnRamp::kPaper);
  EXPECT_EQ(eval::ParseYarnRamp("code", on).value(), kernels::cpu::YarnRamp::kCode);
  EXPECT_EQ(eval::ParseYarnRamp("code", eval::ParseYarnFactor("auto", transformer).value()).value(),
            kernels::cpu::YarnRamp::kCode);
  EXPECT_EQ(eval::ParseYarnRamp("hf", on).status().message(),
            "--yarn_ramp=hf: expected paper (YaRN's equation, linear in the turns r) or code (its authors' code, "
            "linear in the pair index)");
  EXPECT_EQ(eval::ParseYarnRamp("code", off).status().message(),
            "--yarn_ramp=code: YaRN is off (no --yarn_factor, or 1), so there is no ramp to choose; give "
            "--yarn_factor=F|auto");
}

// (0.1 ln 4 + 1)² = 1.138629² = 1.296477.
TEST(YarnTest, LogitScaleIsTheSquareOfPointOneLnFPlusOne) {
  EXPECT_NEAR(YarnLogitScale(4.0), 1.2964770, 1e-7);
  EXPECT_EQ(YarnLogitScale(1.0), 1.0);
}

// F = 1 is today's RoPE bit for bit: the formula of the plain kernel, written out here.
TEST(YarnTest, FactorOneIsPlainRopeBitForBit) {
  const int64_t T = 37, H = 3, dh = 16, ld = H * dh, half = dh / 2;
  std::vector<float> x(T * ld), want;
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * float(i)) + 0.1f;
  want = x;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t p = 0; p < half; ++p) {
      const double phi = double(t) * std::pow(10000.0, -2.0 * double(p) / double(dh));
      const float c = static_cast<float>(std::cos(phi)), s = static_cast<float>(std::sin(phi));
      for (int64_t h = 0; h < H; ++h) {
        float* z = want.data() + t * ld + h * dh;
        const float a = z[p], b = z[p + half];
        z[p] = a * c - b * s;
        z[p + half] = a * s + b * c;
      }
    }
  }
  std::vector<float> got = x;
  Rope(got.data(), ld, 1, T, H, dh, false, 0, RopeScaling{1.0, 8.0});
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

// With F = 4, L = 1000, the pair p = 1 of a head at position t = 300 turns by 300 · θ'_1.
TEST(YarnTest, RopeTurnsByTheScaledFrequency) {
  const int64_t dh = 8, t = 300;
  std::vector<double> x((t + 1) * dh, 0.0);
  x[t * dh + 1] = 1.0;  // a = 1, b = 0 in pair 1 of position t
  Rope(x.data(), dh, 1, t + 1, 1, dh, false, 0, RopeScaling{4.0, 1000.0});
  const double phi = 300 * 0.1 * (0.25 + 0.75 * ((1000 / (2 * std::numbers::pi * 10) - 1) / 31));
  EXPECT_NEAR(x[t * dh + 1], std::cos(phi), 1e-12);
  EXPECT_NEAR(x[t * dh + 1 + dh / 2], std::sin(phi), 1e-12);
}

// The flag: a number ≥ 1 or auto, for a model with RoPE (the Transformer, Multiscreen with
// position ROPE); Multiscreen with MIPE or NOPE has none to rescale and is refused.
TEST(YarnTest, TheFlagTakesANumberOrAutoForModelsWithRope) {
  auto model = [](bool transformer, kernels::PositionKind position, const char* name,
                  AttentionKind attention = AttentionKind::kSoftmax) {
    ModelDims d;
    d.family = transformer ? ModelFamily::kTransformer : ModelFamily::kMultiscreen;
    d.position = position;  // unused by a Transformer
    d.attention = attention;  // unused by Multiscreen
    d.name = name;
    return d;
  };
  constexpr auto kMipe = kernels::PositionKind::kMipe, kNope = kernels::PositionKind::kNope,
                 kRope = kernels::PositionKind::kRope;
  const ModelDims transformer = model(true, kMipe, "t");
  auto four = eval::ParseYarnFactor("4", transformer);
  ASSERT_TRUE(four.ok());
  EXPECT_EQ(eval::YarnFactorFor(*four, 100, 10).value(), 4.0);
  auto automatic = eval::ParseYarnFactor("auto", transformer);
  ASSERT_TRUE(automatic.ok());
  EXPECT_EQ(eval::YarnFactorFor(*automatic, 8192, 2048).value(), 4.0);
  EXPECT_EQ(eval::YarnFactorFor(*automatic, 1000, 2048).value(), 1.0);  // never below 1
  // auto is held to the bound an explicit factor is: 1024 exactly is taken, 2048 refused.
  EXPECT_EQ(eval::YarnFactorFor(*automatic, 1024 * 16, 16).value(), 1024.0);
  EXPECT_EQ(eval::YarnFactorFor(*automatic, 2048 * 16, 16).status().message(),
            "--yarn_factor=auto: the context-matched factor 32768 / 16 = 2048 (evaluation length / training length) "
            "is above 1024, the largest factor YaRN takes (fp32 RoPE resolves no finer): evaluate shorter, or give "
            "--train_len");
  auto rope = eval::ParseYarnFactor("2", model(false, kRope, "psi32_rope"));  // the paper's Figs. 21–22
  ASSERT_TRUE(rope.ok());
  EXPECT_EQ(eval::YarnFactorFor(*rope, 100, 10).value(), 2.0);
  EXPECT_TRUE(eval::ParseYarnFactor("auto", model(false, kRope, "psi32_rope")).value().automatic);
  EXPECT_TRUE(eval::ParseYarnFactor("1", model(false, kMipe, "psi8")).ok());  // the default: nothing asked
  EXPECT_EQ(eval::ParseYarnFactor("0.5", transformer).status().message(),
            "--yarn_factor=0.5: expected a decimal number in [1, 1024] (1: plain RoPE) or auto (evaluation length / "
            "training length)");
  EXPECT_EQ(eval::ParseYarnFactor("0.5", model(false, kRope, "r")).status().message(),
            "--yarn_factor=0.5: expected a decimal number in [1, 1024] (1: plain RoPE) or auto (evaluation length / "
            "training length)");
  EXPECT_EQ(eval::ParseYarnFactor("auto", model(false, kMipe, "psi8")).status().message(),
            "--yarn_factor=auto: model psi8 is Multiscreen with position: MIPE, which has no RoPE for YaRN to rescale "
            "(--yarn_factor takes a RoPE Transformer or a Multiscreen model with position: ROPE)");
  EXPECT_EQ(eval::ParseYarnFactor("2", model(false, kNope, "psi8_nope")).status().message(),
            "--yarn_factor=2: model psi8_nope is Multiscreen with position: NOPE, which has no RoPE for YaRN to rescale "
            "(--yarn_factor takes a RoPE Transformer or a Multiscreen model with position: ROPE)");
  // The Transformer with the screening unit in place of attention positions by MiPE.
  const ModelDims screening = model(true, kMipe, "ts", AttentionKind::kScreening);
  EXPECT_TRUE(eval::ParseYarnFactor("1", screening).ok());
  EXPECT_EQ(eval::ParseYarnFactor("8", screening).status().message(),
            "--yarn_factor=8: model ts is a Transformer with attention: SCREENING, which has no RoPE for YaRN to "
            "rescale (--yarn_factor takes a RoPE Transformer or a Multiscreen model with position: ROPE)");
}

TEST(YarnTest, TheFactorIsAPlainDecimalFromOneToTheLargestThatKeepsAdjacentPositionsApart) {
  // strtod's hex ("0x2" read as 2), inf, nan and blanks were accepted, and any size.
  ModelDims transformer;
  transformer.family = ModelFamily::kTransformer;
  for (const char* text : {"1", "1.5", "8", "1e1", "1024", "1024.0"}) {
    EXPECT_TRUE(eval::ParseYarnFactor(text, transformer).ok()) << text;
  }
  EXPECT_EQ(eval::ParseYarnFactor("1e1", transformer).value().factor, 10.0);
  for (const char* text : {"0x2", "0x1p3", "inf", "nan", " 2", "2 ", "1024.5", "1e4", "1e999", "", "2x"}) {
    EXPECT_EQ(eval::ParseYarnFactor(text, transformer).status().message(),
              absl::StrCat("--yarn_factor=", text, ": expected a decimal number in [1, 1024] (1: plain RoPE) or auto ",
                           "(evaluation length / training length)"))
        << text;
  }
}

}  // namespace
}  // namespace multiscreen
