// The head's panel kernels against plain loops in fp64, on every instruction-set path
// (each has its own register tiles): every register tile and its
// tails (rows not a multiple of the tile, a vocabulary that ends inside a panel, panel
// ranges that start past 0), in fp32 and fp64, for d_E of one, two and four vectors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/head_panels.h"
#include "kernels/cpu/simd.h"
#include "tests/kernels/isa_test.h"

namespace multiscreen::kernels::cpu {
namespace {

template <typename Real>
std::vector<Real> Normal(int64_t n, uint32_t seed, double sd) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0, sd);
  std::vector<Real> v(n);
  for (auto& x : v) x = static_cast<Real>(dist(gen));
  return v;
}

template <typename Real>
void CheckPanels(int64_t rows, int64_t d_e, int64_t V, int64_t p0, int64_t p1, double tol) {
  SCOPED_TRACE(::testing::Message() << "rows " << rows << ", d_E " << d_e << ", V " << V << ", panels [" << p0
                                    << ", " << p1 << "), " << sizeof(Real) * 8 << "-bit");
  ASSERT_TRUE(HeadPanelsSupport<Real>(d_e));
  const Real scale = 3, shift = 3.5;
  const auto y = Normal<Real>(rows * d_e, 1, 1.0 / std::sqrt(double(d_e)));
  const auto e_bar = Normal<Real>(V * d_e, 2, 1.0 / std::sqrt(double(d_e)));
  const auto y_s = Normal<Real>(rows * d_e, 3, 1.0);
  const int64_t np = HeadPanelCount(V), nq = p1 - p0;
  std::vector<Real> panels(np * d_e * kHeadPanel, Real(-7));
  PackHeadPanels(e_bar.data(), V, d_e, panels.data());

  // Numerators and their row sums.
  std::vector<Real> z_p(nq * rows * kHeadPanel, Real(-1));
  std::vector<double> row_sum(rows, 0.5);
  HeadNumerators(y.data(), rows, d_e, panels.data(), p0, p1, V, scale, shift, z_p.data(), row_sum.data());
  std::vector<double> z_ref(nq * rows * kHeadPanel, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0.5;
    for (int64_t p = p0; p < p1; ++p) {
      for (int64_t c = 0; c < kHeadPanel; ++c) {
        const int64_t v = p * kHeadPanel + c;
        double& z = z_ref[((p - p0) * rows + r) * kHeadPanel + c];
        if (v >= V) continue;  // padding: exactly zero
        double dot = 0;
        for (int64_t j = 0; j < d_e; ++j) dot += double(y[r * d_e + j]) * double(e_bar[v * d_e + j]);
        z = std::exp(double(scale) * dot - double(shift));
        sum += z;
      }
    }
    EXPECT_NEAR(row_sum[r], sum, tol * sum) << "row " << r;
  }
  for (size_t i = 0; i < z_p.size(); ++i) {
    if (z_ref[i] == 0) {
      EXPECT_EQ(z_p[i], Real(0)) << i;
    } else {
      EXPECT_NEAR(z_p[i], z_ref[i], tol * z_ref[i]) << i;
    }
  }

  // dy = z Ē over the panels.
  std::vector<Real> dy(rows * d_e, Real(99));
  HeadNumeratorsEBar(z_p.data(), rows, d_e, e_bar.data(), p0, p1, V, dy.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < d_e; ++j) {
      double ref = 0, mag = 0;
      for (int64_t p = p0; p < p1; ++p) {
        for (int64_t c = 0; c < kHeadPanel && p * kHeadPanel + c < V; ++c) {
          const double term = double(z_p[((p - p0) * rows + r) * kHeadPanel + c]) *
                              double(e_bar[(p * kHeadPanel + c) * d_e + j]);
          ref += term;
          mag += std::abs(term);
        }
      }
      EXPECT_NEAR(dy[r * d_e + j], ref, tol * mag + 1e-300) << r << ", " << j;
    }
  }

  // ∂Ē through the panels: accumulated onto what d_panels held, then unpacked onto d_e_bar.
  std::vector<Real> d_panels(np * d_e * kHeadPanel, Real(0));
  for (int64_t p = p0; p < p1; ++p) d_panels[(p * d_e + 1) * kHeadPanel + 2] = Real(0.25);  // a prior sum
  HeadPanelsGradAdd(y_s.data(), rows, d_e, z_p.data(), p0, p1, d_panels.data());
  std::vector<Real> d_e_bar(V * d_e, Real(1));
  UnpackHeadPanelsAdd(d_panels.data(), V, d_e, d_e_bar.data());
  EXPECT_TRUE(std::all_of(d_panels.begin(), d_panels.end(), [](Real x) { return x == Real(0); }));
  for (int64_t v = 0; v < V; ++v) {
    const int64_t p = v / kHeadPanel, c = v % kHeadPanel;
    for (int64_t j = 0; j < d_e; ++j) {
      double ref = 1, mag = 1;
      if (p >= p0 && p < p1) {
        if (j == 1 && c == 2) ref += 0.25;
        for (int64_t r = 0; r < rows; ++r) {
          const double term = double(y_s[r * d_e + j]) * double(z_p[((p - p0) * rows + r) * kHeadPanel + c]);
          ref += term;
          mag += std::abs(term);
        }
      }
      EXPECT_NEAR(d_e_bar[v * d_e + j], ref, tol * mag) << v << ", " << j;
    }
  }
}

class HeadPanelsTest : public IsaTest {};
MS_INSTANTIATE_ON_EVERY_ISA(HeadPanelsTest);

TEST_P(HeadPanelsTest, Fp32KernelsMatchPlainLoops) {
  CheckPanels<float>(13, 64, 100, 0, 4, 2e-6);   // 13 rows: one 8-row tile and tails; V ends inside panel 3
  CheckPanels<float>(8, 16, 70, 1, 3, 2e-6);     // one vector of d_E; panels [1, 3)
  CheckPanels<float>(3, 32, 32, 0, 1, 2e-6);     // two vectors of d_E; one full panel
  CheckPanels<float>(20, 64, 200, 2, 7, 2e-6);   // d_E = 64 as in Ψ = 8; the last panel is partial
}

TEST_P(HeadPanelsTest, Fp64KernelsMatchPlainLoops) {
  CheckPanels<double>(13, 16, 100, 0, 4, 1e-13);
  CheckPanels<double>(7, 8, 45, 1, 2, 1e-13);
  CheckPanels<double>(9, 64, 96, 0, 3, 1e-13);
}

TEST(HeadPanelsSupportTest, WidthsThatAreNotWholeVectorsAreRefused) {
  EXPECT_FALSE(HeadPanelsSupport<float>(4));
  EXPECT_FALSE(HeadPanelsSupport<float>(24));
  EXPECT_TRUE(HeadPanelsSupport<float>(16));
  EXPECT_TRUE(HeadPanelsSupport<double>(8));
  EXPECT_FALSE(HeadPanelsSupport<double>(4));
}

// ExpFastVec on one Target's vectors, lane by lane against ExpFast (compiled for that path).
struct ExpFastVecLanes {
  template <typename Target>
  MS_ALWAYS_INLINE static void Run(const float* x, float* clamped, float* in_range) {
    constexpr int L = kLanes<Target, float>;
    for (int i = 0; i < 16; i += L) {
      Vec<Target, float> v;
      std::memcpy(&v, x + i, sizeof(v));
      const Vec<Target, float> e = ExpFastVec<Target, float>(v), e_in = ExpFastVec<Target, float, true>(v);
      std::memcpy(clamped + i, &e, sizeof(e));
      std::memcpy(in_range + i, &e_in, sizeof(e_in));
    }
  }
};

TEST_P(HeadPanelsTest, ExpFastVecIsExpFastLaneByLane) {
  const float inputs[16] = {-100.f, -87.4f, -87.3f, -20.f, -1.f, -1e-8f, 0.f, 1e-8f,
                            0.5f,   1.f,    10.f,   50.f,  88.f, 88.7f, 95.f, std::nanf("")};
  float e[16], unused[16];
  IsaDispatch<ExpFastVecLanes>(inputs, e, unused);
  for (int l = 0; l < 15; ++l) {
    const float ref = ExpFast(inputs[l]);
    EXPECT_NEAR(e[l], ref, 2e-7f * ref) << inputs[l];
  }
  EXPECT_TRUE(std::isnan(e[15]));
  EXPECT_EQ(e[0], 0.0f);
  // Without the clamps: the same inside the range, and NaN still NaN.
  float x[16], clamped[16], e_in[16];
  for (int l = 0; l < 16; ++l) x[l] = -87.3f + 11.6f * l;
  x[15] = std::nanf("");
  IsaDispatch<ExpFastVecLanes>(x, clamped, e_in);
  for (int l = 0; l < 15; ++l) EXPECT_EQ(e_in[l], clamped[l]) << x[l];
  EXPECT_TRUE(std::isnan(e_in[15]));
}

}  // namespace
}  // namespace multiscreen::kernels::cpu
