// The CPU's bf16 products (kernels/cpu/gemm_bf16.h): the conversion is FloatToBf16 bit for
// bit on every path, and GemmBf16 is the exact product of the bf16 values up to fp32
// accumulation: against a long-double reference, each entry within the fp32 sums' bound.
#include "kernels/cpu/gemm_bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/fma_peak.h"
#include "kernels/cpu/isa.h"

namespace multiscreen::kernels::cpu {
namespace {

// Restores the ISA cap a test changed.
struct IsaCapGuard {
  Isa before = ActiveIsa();
  ~IsaCapGuard() { (void)SetIsaCap(before); }
};

uint32_t Bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

TEST(GemmBf16Test, ToBf16IsFloatToBf16BitForBitOnEveryPath) {
  std::mt19937 rng(3);
  std::vector<float> x;
  // Ties both ways, subnormals, the largest finite values (rounding up to inf), inf, NaNs.
  for (uint32_t b : {0x3f808000u, 0x3f818000u, 0x00000001u, 0x00408000u, 0x807fffffu, 0x7f7fffffu, 0xff7f8000u,
                     0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffffffffu, 0x80000000u}) {
    float f;
    std::memcpy(&f, &b, 4);
    x.push_back(f);
  }
  std::uniform_int_distribution<uint32_t> any;
  while (x.size() < 1000) {
    const uint32_t b = any(rng);
    float f;
    std::memcpy(&f, &b, 4);
    x.push_back(f);
  }
  for (Isa isa : SupportedIsas()) {
    IsaCapGuard guard;
    ASSERT_TRUE(SetIsaCap(isa).ok());
    SCOPED_TRACE(IsaName(isa));
    std::vector<uint16_t> half(x.size());
    std::vector<float> rounded(x.size());
    ToBf16(x.data(), static_cast<int64_t>(x.size()), half.data(), rounded.data());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(half[i], FloatToBf16(x[i])) << "x = 0x" << std::hex << Bits(x[i]);
      ASSERT_EQ(Bits(rounded[i]), Bits(Bf16ToFloat(half[i])));
    }
    // In place: x itself rounded.
    std::vector<float> y = x;
    ToBf16(y.data(), static_cast<int64_t>(y.size()), half.data(), y.data());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(Bits(y[i]), Bits(rounded[i]));
    // No dst: the rounded values alone (the CPU table's RoundTo under bf16), in place, on
    // more than the threaded pass's four blocks of 2^14, a length that leaves a tail.
    std::vector<float> big, expected;
    while (big.size() < 70001) big.insert(big.end(), x.begin(), x.end());
    big.resize(70001);
    expected = big;
    RoundToBf16(expected.data(), static_cast<int64_t>(expected.size()));
    ToBf16(big.data(), static_cast<int64_t>(big.size()), nullptr, big.data());
    for (size_t i = 0; i < big.size(); ++i) ASSERT_EQ(Bits(big[i]), Bits(expected[i])) << "element " << i;
  }
}

TEST(GemmBf16Test, AvailableExactlyOnTheAvx512PathOfABf16Cpu) {
  IsaCapGuard guard;
  for (Isa isa : SupportedIsas()) {
    ASSERT_TRUE(SetIsaCap(isa).ok());
    EXPECT_EQ(Bf16GemmAvailable(), isa == Isa::kAvx512 && CpuHasAvx512Bf16()) << IsaName(isa);
  }
}

// op(A) op(B) of the bf16 values in long double, then C as GemmBf16 defines it, each entry
// against the fp32 accumulation bound (k + 3) · 2^-24 · (|alpha| Σ|a b| + |beta c|).
TEST(GemmBf16Test, ProductOfTheBf16ValuesUpToFp32Accumulation) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  const int64_t m = 37, n = 70, k = 300;
  for (int layout = 0; layout < 4; ++layout) {
    for (auto [alpha, beta] : std::initializer_list<std::pair<float, float>>{{1, 0}, {1, 1}, {0.75f, 1}, {-3, 0}, {1, 0.5f}}) {
      const bool ta = layout & 1, tb = layout & 2;
      SCOPED_TRACE(testing::Message() << "trans " << ta << tb << ", alpha " << alpha << ", beta " << beta);
      const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
      std::vector<float> a((ta ? k : m) * lda), b((tb ? n : k) * ldb), c(m * ldc);
      for (float& v : a) v = normal(rng);
      for (float& v : b) v = normal(rng);
      for (float& v : c) v = normal(rng);
      std::vector<uint16_t> a16(a.size()), b16(b.size());
      ToBf16(a.data(), static_cast<int64_t>(a.size()), a16.data(), nullptr);
      ToBf16(b.data(), static_cast<int64_t>(b.size()), b16.data(), nullptr);
      std::vector<float> got = c;
      GemmBf16(ta, tb, m, n, k, alpha, a16.data(), lda, b16.data(), ldb, beta, got.data(), ldc);
      double worst = 0, unrounded_diff = 0;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          long double sum = 0, abs_sum = 0, unrounded = 0;
          for (int64_t p = 0; p < k; ++p) {
            const long double av = Bf16ToFloat(a16[ta ? p * lda + i : i * lda + p]);
            const long double bv = Bf16ToFloat(b16[tb ? j * ldb + p : p * ldb + j]);
            sum += av * bv;
            abs_sum += std::fabs(av * bv);
            unrounded += (long double)a[ta ? p * lda + i : i * lda + p] * b[tb ? j * ldb + p : p * ldb + j];
          }
          const long double want = alpha * sum + (long double)beta * c[i * ldc + j];
          const long double bound =
              (k + 3) * std::ldexp(1.0L, -24) * (std::fabs(alpha) * abs_sum + std::fabs(beta * c[i * ldc + j]));
          const double err = double(std::fabs(got[i * ldc + j] - want));
          worst = std::max(worst, double(err / bound));
          unrounded_diff = std::max(unrounded_diff, double(std::fabs(sum - unrounded)));
        }
        for (int64_t j = n; j < ldc; ++j) ASSERT_EQ(got[i * ldc + j], c[i * ldc + j]);  // past n: untouched
      }
      EXPECT_LE(worst, 1.0);
      EXPECT_GT(unrounded_diff, 1e-2);  // the operands really are bf16
    }
  }
}

}  // namespace
}  // namespace multiscreen::kernels::cpu
