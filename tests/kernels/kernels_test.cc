// The small CPU kernels against closed forms and their own derivatives.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/mipe.h"
#include "kernels/cpu/softmask.h"
#include "kernels/cpu/tanh_norm.h"
#include "kernels/cpu/unit_rows.h"
#include "tests/kernels/isa_test.h"

namespace multiscreen::kernels::cpu {
namespace {

TEST(TanhNormTest, SeriesAndClosedFormAgreeWhereTheySwitch) {
  for (double n : {0.0999999, 0.1, 0.1000001}) {
    double f, g;
    TanhNormScale(n, &f, &g);
    EXPECT_NEAR(f, std::tanh(n) / n, 1e-12) << n;  // series truncated after n⁸: error ~9e-13 at 0.1
    const double g_exact = (n * (1 - std::tanh(n) * std::tanh(n)) - std::tanh(n)) / (n * n * n);
    EXPECT_NEAR(g, g_exact, 1e-9) << n;
  }
  float f32, g32;
  TanhNormScale(0.09f, &f32, &g32);
  EXPECT_NEAR(f32, std::tanh(0.09) / 0.09, 1e-7);
  const double t = std::tanh(0.09);
  EXPECT_NEAR(g32, (0.09 * (1 - t * t) - t) / (0.09 * 0.09 * 0.09), 1e-6);
}

TEST(TanhNormTest, ZeroRowsStayZeroAndOutputsStayInsideTheUnitBall) {
  std::vector<double> h = {0, 0, 0, 3, 4, 0, 1e-9, 0, 0};
  std::vector<double> u(9);
  TanhNormForward(h.data(), u.data(), 3, 3);
  EXPECT_EQ(u[0], 0.0);
  EXPECT_NEAR(std::hypot(u[3], u[4]), std::tanh(5.0), 1e-15);
  EXPECT_NEAR(u[6], 1e-9, 1e-24);
}

TEST(TanhNormTest, BackwardMatchesFiniteDifferences) {
  const std::vector<double> h = {0.3, -0.2, 0.5, 0.01, 0.02, -0.03, 2.0, 1.0, -1.5};
  const std::vector<double> du = {0.7, -1.1, 0.4, 0.2, -0.3, 0.9, 0.5, 0.25, -0.8};
  std::vector<double> dh(9);
  TanhNormBackward(h.data(), du.data(), dh.data(), 3, 3);
  for (int i = 0; i < 9; ++i) {
    std::vector<double> up = h, down = h, u_up(9), u_down(9);
    up[i] += 1e-7;
    down[i] -= 1e-7;
    TanhNormForward(up.data(), u_up.data(), 3, 3);
    TanhNormForward(down.data(), u_down.data(), 3, 3);
    double fd = 0;
    for (int j = 0; j < 9; ++j) fd += du[j] * (u_up[j] - u_down[j]) / 2e-7;
    EXPECT_NEAR(dh[i], fd, 1e-7) << i;
  }
}

TEST(SoftmaskTest, ReachesExactlyZeroAtTheWindowAndSeesCeilWKeys) {
  EXPECT_EQ(SoftmaskKeys(4.0, 100), 4);
  EXPECT_EQ(SoftmaskKeys(4.2, 100), 5);
  EXPECT_EQ(SoftmaskKeys(4.2, 3), 3);
  EXPECT_EQ(SoftmaskKeys(INFINITY, 7), 7);
  std::vector<double> m(5), dm(5);
  SoftmaskTable(4.2, 5, m.data(), dm.data());
  EXPECT_EQ(m[0], 1.0);
  EXPECT_NEAR(m[2], 0.5 * (std::cos(std::numbers::pi * 2 / 4.2) + 1), 1e-15);
  EXPECT_GT(m[4], 0.0);
  // ∂m/∂w against a central difference.
  std::vector<double> m_up(5), m_down(5), unused(5);
  SoftmaskTable(4.2 + 1e-6, 5, m_up.data(), unused.data());
  SoftmaskTable(4.2 - 1e-6, 5, m_down.data(), unused.data());
  for (int d = 0; d < 5; ++d) EXPECT_NEAR(dm[d], (m_up[d] - m_down[d]) / 2e-6, 1e-8) << d;
}

TEST(MipeTest, NoPositionalSignalAtOrPastTheThreshold) {
  double rate, rate_dw;
  MipeRate(256.0, 256.0, &rate, &rate_dw);
  EXPECT_EQ(rate, 0.0);
  MipeRate(300.0, 256.0, &rate, &rate_dw);
  EXPECT_EQ(rate, 0.0);
  MipeRate(16.0, 256.0, &rate, &rate_dw);
  const double gamma = 0.5 * (std::cos(std::numbers::pi * 16 / 256) + 1);
  EXPECT_NEAR(rate, std::numbers::pi * gamma / 16, 1e-15);
  double up, down, unused;
  MipeRate(16.0 + 1e-6, 256.0, &up, &unused);
  MipeRate(16.0 - 1e-6, 256.0, &down, &unused);
  EXPECT_NEAR(rate_dw, (up - down) / 2e-6, 1e-9);
}

TEST(MipeTest, RotationAtLargePositionsUsesFp64Angles) {
  // Position 2^20 with an fp32 vector: the angle must be exact to fp64, so the
  // rotation of (1, 0) equals (cos φ, sin φ) to fp32 rounding.
  float z[2] = {1.0f, 0.0f};
  const double rate = 0.01;
  MipeRotateForward(z, 2, 1, int64_t{1} << 20, rate);
  const double phi = double(1 << 20) * rate;
  EXPECT_NEAR(z[0], std::cos(phi), 1e-7);
  EXPECT_NEAR(z[1], std::sin(phi), 1e-7);
}

TEST(UnitRowsTest, FloorKeepsZeroRowsFinite) {
  std::vector<float> x = {0, 0, 3, 4}, y(4), n(2);
  UnitRowsForward(x.data(), 2, y.data(), 2, n.data(), 2, 2);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_FLOAT_EQ(y[2], 0.6f);
  EXPECT_FLOAT_EQ(n[1], 5.0f);
}

class Fp16Test : public IsaTest {};  // F16C on the avx2 and avx512 paths, scalar on generic
MS_INSTANTIATE_ON_EVERY_ISA(Fp16Test);

TEST_P(Fp16Test, RoundingMatchesTheCompilersHalfConversionOnEveryPath) {
  // Values across fp16's range: normals, subnormals, ties, overflow, zeros, NaN; 37 of
  // them so that the vector loop and its scalar tail both run.
  std::vector<float> x = {0.f, -0.f, 1.f, 1.0009765625f, 1.00048828125f, 1.00146484375f, 65504.f, 65519.f,
                          65520.f, -70000.f, 6.1035156e-05f, 5.9604645e-08f, 2.9802322e-08f, 2.98023259e-08f,
                          1e-10f, 3.14159265f, -2.71828f, 1e5f, std::nanf(""), 0.1f, 0.2f, 0.3f, 1000.7f,
                          -1000.3f, 12345.678f, 7.6293945e-06f, 4.5e-07f, 0.5f, -0.25f, 2049.f, 2051.f,
                          4097.f, 4099.f, 8193.f, -8195.f, 1.f / 3.f, 123.456f};
  std::vector<float> expected(x.size());
  for (size_t i = 0; i < x.size(); ++i) expected[i] = static_cast<float>(static_cast<_Float16>(x[i]));
  RoundToFp16(x.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(x[i])) << i;
    } else {
      EXPECT_EQ(x[i], expected[i]) << i;
    }
  }
  EXPECT_EQ(x[2], 1.f);
  EXPECT_EQ(x[4], 1.f);              // a tie rounds to even
  EXPECT_EQ(x[5], 1.001953125f);     // the other tie rounds up to even
  EXPECT_TRUE(std::isinf(x[8]));     // 65520 rounds past the largest half
  EXPECT_EQ(x[12], 0.f);             // half of the smallest subnormal ties to zero
}

// Gemm against a plain triple loop in long double for every transpose pair, one row
// (m = 1: the decoders' products, a matrix-vector product) and several, with padded
// strides (op(A)'s one row then strided when A is stored transposed), beta 0 over a C
// holding NaN (C is not read), beta 0.5 and 1, alpha 0.75 and 1 (beta 0 or 1: the training
// step's products, which the avx512 path runs through oneDNN, alpha as its output scale; the
// rest through OpenBLAS: kernels/cpu/gemm.h), k = 0 (C = beta · C) and k past one cache block.
template <typename Real>
void CheckGemmAgainstLoops(double tolerance) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> uniform(-1, 1);
  for (int64_t m : {1, 3, 70}) {
    for (int64_t k : {0, 1, 19, 600}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          // (alpha, beta): the step's (1, 0) and (1, 1), and the others.
          for (const auto& [alpha, beta] :
               std::vector<std::pair<Real, Real>>{{0.75, 0}, {0.75, 0.5}, {-3, 1}, {1, 0}, {1, 1}, {1, 0.5}}) {
            const int64_t n = 37, lda = (ta ? m : k) + 2, ldb = (tb ? k : n) + 3, ldc = n + 1;
            std::vector<Real> a((ta ? k : m) * lda + 1), b((tb ? n : k) * ldb + 1), c(m * ldc);
            for (Real& x : a) x = Real(uniform(rng));
            for (Real& x : b) x = Real(uniform(rng));
            for (Real& x : c) x = beta == Real(0) ? std::numeric_limits<Real>::quiet_NaN() : Real(uniform(rng));
            const std::vector<Real> c0 = c;
            Gemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < n; ++j) {
                long double sum = 0;
                for (int64_t l = 0; l < k; ++l) {
                  sum += (long double)(ta ? a[l * lda + i] : a[i * lda + l]) * (tb ? b[j * ldb + l] : b[l * ldb + j]);
                }
                const long double want = alpha * sum + (beta == Real(0) ? 0.0L : beta * (long double)c0[i * ldc + j]);
                ASSERT_NEAR(double(c[i * ldc + j]), double(want), tolerance * (1 + double(k) / 19))
                    << IsaName(ActiveIsa()) << " m " << m << " k " << k << " trans " << ta << tb << " alpha " << alpha
                    << " beta " << beta << " at " << i << "," << j;
              }
            }
          }
        }
      }
    }
  }
}

class GemmTest : public IsaTest {};
MS_INSTANTIATE_ON_EVERY_ISA(GemmTest);

TEST_P(GemmTest, EveryShapeAndTransposeIsTheProduct) {
  CheckGemmAgainstLoops<float>(1e-5);
  CheckGemmAgainstLoops<double>(1e-13);
}

TEST(IsaSelectionTest, NamesParseAndTheCapHoldsOnlyForPathsTheCpuRuns) {
  for (Isa isa : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512}) {
    auto parsed = ParseIsa(IsaName(isa));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, isa);
  }
  EXPECT_EQ(*ParseIsa("AVX2"), Isa::kAvx2);
  EXPECT_EQ(*ParseIsa("native"), CpuIsa());
  EXPECT_FALSE(ParseIsa("sse9").ok());
  const std::vector<Isa> supported = SupportedIsas();
  ASSERT_FALSE(supported.empty());
  EXPECT_EQ(supported.front(), Isa::kGeneric);
  EXPECT_EQ(supported.back(), CpuIsa());
  const Isa saved = ActiveIsa();
  for (Isa isa : supported) {
    ASSERT_TRUE(SetIsaCap(isa).ok());
    EXPECT_EQ(ActiveIsa(), isa);
  }
  if (CpuIsa() != Isa::kAvx512) {
    const absl::Status s = SetIsaCap(Isa::kAvx512);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(std::string(s.message()).find("this CPU cannot run the avx512 path"), std::string::npos) << s;
  }
  ASSERT_TRUE(SetIsaCap(saved).ok());
}

TEST(Bf16Test, RoundsToNearestEven) {
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f)), 1.0f);
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 0x1.0p-8f)), 1.0f);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 0x1.8p-8f)), 1.0f + 0x1.0p-7f);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(NAN))));
}

}  // namespace
}  // namespace multiscreen::kernels::cpu
