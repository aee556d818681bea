// The bf16 head's softmax numerators (kernels/cpu/cross_entropy.h SoftmaxNumeratorsBf16):
// on every instruction-set path, bit for bit the fp32 numerators SoftmaxNumerators writes
// converted by FloatToBf16, and the same lse, target logits and row scales, with the row
// max or a fixed shift, a row whose target lies elsewhere, a NaN logit and rows of a
// length that leaves a vector tail.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/isa.h"

namespace multiscreen::kernels::cpu {
namespace {

struct IsaCapGuard {
  Isa before = ActiveIsa();
  ~IsaCapGuard() { (void)SetIsaCap(before); }
};

uint64_t Bits(double x) {
  uint64_t b;
  std::memcpy(&b, &x, 8);
  return b;
}

TEST(SoftmaxNumeratorsBf16Test, TheFp32NumeratorsRoundedBitForBitOnEveryPath) {
  constexpr int64_t kRows = 5, kV = 1003, kLd = 1011;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 3.f);
  std::vector<float> z(kRows * kLd, -1e30f);  // the padding past V must not be read
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t v = 0; v < kV; ++v) z[r * kLd + v] = normal(rng);
  }
  z[3 * kLd + 17] = std::nanf("");  // a NaN logit: its row's numerators and sums are NaN
  const std::vector<int64_t> target = {4, -1, 1002, 0, 500};
  for (double shift : {std::nan(""), 20.0}) {
    for (Isa isa : SupportedIsas()) {
      IsaCapGuard guard;
      ASSERT_TRUE(SetIsaCap(isa).ok());
      SCOPED_TRACE(std::string(IsaName(isa)) + (std::isnan(shift) ? ", row max" : ", fixed shift"));
      std::vector<float> expected = z;
      std::vector<double> lse(kRows), logit(kRows), scale(kRows);
      SoftmaxNumerators(expected.data(), kLd, kRows, kV, shift, target.data(), lse.data(), logit.data(),
                        scale.data());
      constexpr int64_t kLd16 = 1009;
      std::vector<uint16_t> z16(kRows * kLd16, 0xdead);
      std::vector<double> lse16(kRows), logit16(kRows), scale16(kRows);
      const std::vector<float> before = z;
      SoftmaxNumeratorsBf16(z.data(), kLd, kRows, kV, shift, target.data(), lse16.data(), logit16.data(),
                            scale16.data(), z16.data(), kLd16);
      ASSERT_EQ(0, std::memcmp(before.data(), z.data(), z.size() * sizeof(float))) << "z was written";
      for (int64_t r = 0; r < kRows; ++r) {
        EXPECT_EQ(Bits(lse[r]), Bits(lse16[r])) << "row " << r;
        EXPECT_EQ(Bits(logit[r]), Bits(logit16[r])) << "row " << r;
        EXPECT_EQ(Bits(scale[r]), Bits(scale16[r])) << "row " << r;
        for (int64_t v = 0; v < kV; ++v) {
          ASSERT_EQ(z16[r * kLd16 + v], FloatToBf16(expected[r * kLd + v])) << "row " << r << ", v " << v;
        }
        for (int64_t v = kV; v < kLd16; ++v) ASSERT_EQ(z16[r * kLd16 + v], 0xdead) << "past V: row " << r;
      }
      EXPECT_TRUE(std::isnan(lse16[3]));
      EXPECT_TRUE(std::isfinite(lse16[0]));
    }
  }
}

}  // namespace
}  // namespace multiscreen::kernels::cpu
