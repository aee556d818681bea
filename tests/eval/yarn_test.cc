// YaRN at inference (issue 30): the NTK-by-parts frequencies and the logit scale of
// kernels/cpu/rope.h against values worked by hand, F = 1 against the plain RoPE formula
// bit for bit, and the --yarn_factor flag (eval/yarn.h). The models with YaRN against an
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
