// The Transformer's CPU kernels (kernels/cpu/{attention,rms_norm,rope,swiglu}.h) against
// dense references and central finite differences, in double precision; the CPU table's
// attention with RoPE inside the op (kernels/cpu/cpu_transformer_kernels.h).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_transformer_kernels.h"
#include "kernels/cpu/rms_norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"

namespace multiscreen::kernels::cpu {
namespace {

std::vector<double> Random(int64_t n, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = normal(rng);
  return v;
}

// ∂f/∂x_i by central differences at every i of x (f reads x).
std::vector<double> NumericGrad(std::vector<double>& x, const std::function<double()>& f, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = f();
    x[i] = saved - h;
    const double down = f();
    x[i] = saved;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

void ExpectClose(const std::vector<double>& got, const std::vector<double>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << "[" << i << "]";
}

TEST(AttentionTest, BlockedForwardEqualsDenseCausalSoftmaxAcrossThreeBlocks) {
  const AttentionShape sh{2, 150, 3, 4};  // T = 150: query and key blocks of 64, 64, 22
  const int64_t n = sh.batch * sh.seq * sh.heads * sh.d_h, ld = sh.heads * sh.d_h;
  const auto q = Random(n, 1, 1.5), k = Random(n, 2, 1.5), v = Random(n, 3);
  const double scale[3] = {0.5, 1.0, 2.0};
  std::vector<double> o(n), lse(sh.batch * sh.heads * sh.seq);
  AttentionForward(sh, q.data(), k.data(), v.data(), scale, o.data(), lse.data());
  double worst = 0;
  for (int64_t b = 0; b < sh.batch; ++b) {
    for (int64_t h = 0; h < sh.heads; ++h) {
      for (int64_t i = 0; i < sh.seq; ++i) {
        std::vector<double> s(i + 1);
        double m = -1e300, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < sh.d_h; ++c) dot += q[(b * sh.seq + i) * ld + h * sh.d_h + c] * k[(b * sh.seq + j) * ld + h * sh.d_h + c];
          s[j] = scale[h] * dot;
          m = std::max(m, s[j]);
        }
        for (double& x : s) sum += (x = std::exp(x - m));
        EXPECT_NEAR(lse[(b * sh.heads + h) * sh.seq + i], m + std::log(sum), 1e-12);
        for (int64_t c = 0; c < sh.d_h; ++c) {
          double want = 0;
          for (int64_t j = 0; j <= i; ++j) want += s[j] / sum * v[(b * sh.seq + j) * ld + h * sh.d_h + c];
          worst = std::max(worst, std::abs(o[(b * sh.seq + i) * ld + h * sh.d_h + c] - want));
        }
      }
    }
  }
  EXPECT_LT(worst, 1e-12);
}

TEST(AttentionTest, FirstQuerySeesOnlyItselfAndFutureKeysChangeNothing) {
  const AttentionShape sh{1, 70, 1, 4};
  const int64_t n = sh.seq * sh.d_h;
  auto q = Random(n, 4), k = Random(n, 5), v = Random(n, 6);
  const double scale = 1.0;
  std::vector<double> o(n), o2(n), lse(sh.seq);
  AttentionForward(sh, q.data(), k.data(), v.data(), &scale, o.data(), lse.data());
  for (int64_t c = 0; c < sh.d_h; ++c) EXPECT_DOUBLE_EQ(o[c], v[c]);
  for (int64_t c = 0; c < sh.d_h; ++c) k[69 * sh.d_h + c] += 5, v[69 * sh.d_h + c] -= 3;  // the last key only
  AttentionForward(sh, q.data(), k.data(), v.data(), &scale, o2.data(), lse.data());
  for (int64_t i = 0; i < 69 * sh.d_h; ++i) EXPECT_EQ(o[i], o2[i]);
}

// AttentionBackward's dq, dk, dv (every `stride`-th element) and d_scale (all) against
// central differences of loss = Σ w ⊙ o, within `tol` relative (1 + |g|). Inputs drawn
// with seeds seed .. seed + 3, q and k of amplitude `amplitude`.
void ExpectAttentionBackwardMatchesFiniteDifferences(const AttentionShape& sh, uint64_t seed, double amplitude,
                                                     std::vector<double> scale, int64_t stride, double tol) {
  const int64_t n = sh.batch * sh.seq * sh.heads * sh.d_h;
  auto q = Random(n, seed, amplitude), k = Random(n, seed + 1, amplitude), v = Random(n, seed + 2);
  const auto w = Random(n, seed + 3);  // loss = Σ w ⊙ o
  std::vector<double> o(n), stat(sh.batch * sh.heads * sh.seq);
  auto loss = [&] {
    AttentionForward(sh, q.data(), k.data(), v.data(), scale.data(), o.data(), stat.data());
    return Dot(w, o);
  };
  loss();
  std::vector<double> dq(n), dk(n), dv(n), d_scale(sh.heads);
  AttentionBackward(sh, q.data(), k.data(), v.data(), o.data(), stat.data(), w.data(), scale.data(), dq.data(),
                    dk.data(), dv.data(), d_scale.data());
  for (auto [x, g, name] : {std::tuple{&q, &dq, "dq"}, std::tuple{&k, &dk, "dk"}, std::tuple{&v, &dv, "dv"}}) {
    for (int64_t i = 0; i < n; i += stride) {
      const double saved = (*x)[i];
      (*x)[i] = saved + 1e-6;
      const double up = loss();
      (*x)[i] = saved - 1e-6;
      const double down = loss();
      (*x)[i] = saved;
      EXPECT_NEAR((*g)[i], (up - down) / 2e-6, tol * (1 + std::abs((*g)[i]))) << name << "[" << i << "]";
    }
  }
  ExpectClose(d_scale, NumericGrad(scale, loss), tol, "d_scale");
}

TEST(AttentionTest, BackwardMatchesFiniteDifferencesIncludingTheScale) {
  // Two blocks; every 7th element of each input, all of the scales.
  ExpectAttentionBackwardMatchesFiniteDifferences({2, 67, 2, 4}, 7, 1.0, {0.7, 1.3}, 7, 1e-7);
}

// Every mechanism of AttentionKind (kernels/cpu/attention.h) against a dense reference
// written from the definitions (entmax's threshold by bisection, not by sorting) and its
// backward against central differences, over two query/key blocks.
class AttentionKindTest : public ::testing::TestWithParam<AttentionKind> {};

// The weights of one query's scores z[0..n) (n = i + 1 keys), from the definitions.
std::vector<double> DenseWeights(AttentionKind kind, std::vector<double> z) {
  const int64_t n = int64_t(z.size());
  std::vector<double> p(n);
  if (kind == AttentionKind::kSsmax) {
    for (double& x : z) x *= std::log(double(n));
  }
  if (kind == AttentionKind::kSoftmax || kind == AttentionKind::kSoftmax1 || kind == AttentionKind::kSsmax) {
    double sum = kind == AttentionKind::kSoftmax1 ? 1.0 : 0.0;  // + e^0
    for (int64_t j = 0; j < n; ++j) sum += (p[j] = std::exp(z[j]));
    for (double& x : p) x /= sum;
  } else if (kind == AttentionKind::kSigmoid) {
    for (int64_t j = 0; j < n; ++j) p[j] = 1.0 / (1.0 + std::exp(-(z[j] - std::log(double(n)))));
  } else {  // entmax 1.5: τ with Σ max(0, z/2 − τ)² = 1, by bisection on [max z/2 − 1, max z/2]
    double hi = -1e300;
    for (double x : z) hi = std::max(hi, x / 2);
    double lo = hi - 1;
    for (int it = 0; it < 200; ++it) {
      const double mid = 0.5 * (lo + hi);
      double mass = 0;
      for (double x : z) mass += std::pow(std::max(0.0, x / 2 - mid), 2);
      (mass > 1 ? lo : hi) = mid;
    }
    for (int64_t j = 0; j < n; ++j) p[j] = std::pow(std::max(0.0, z[j] / 2 - lo), 2);
  }
  return p;
}

TEST_P(AttentionKindTest, ForwardEqualsTheDenseDefinition) {
  const AttentionShape sh{2, 80, 2, 4, GetParam()};  // query and key blocks of 64, 16
  const int64_t n = sh.batch * sh.seq * sh.heads * sh.d_h, ld = sh.heads * sh.d_h;
  const auto q = Random(n, 21, 1.5), k = Random(n, 22, 1.5), v = Random(n, 23);
  const double scale[2] = {0.6, 1.7};
  std::vector<double> o(n), stat(sh.batch * sh.heads * sh.seq);
  AttentionForward(sh, q.data(), k.data(), v.data(), scale, o.data(), stat.data());
  double worst = 0, zeros = 0, mass_min = 2;
  for (int64_t b = 0; b < sh.batch; ++b) {
    for (int64_t h = 0; h < sh.heads; ++h) {
      for (int64_t i = 0; i < sh.seq; ++i) {
        std::vector<double> z(i + 1);
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < sh.d_h; ++c) dot += q[(b * sh.seq + i) * ld + h * sh.d_h + c] * k[(b * sh.seq + j) * ld + h * sh.d_h + c];
          z[j] = scale[h] * dot;
        }
        const std::vector<double> p = DenseWeights(sh.kind, z);
        double mass = 0;
        for (double x : p) mass += x, zeros += x == 0;
        mass_min = std::min(mass_min, mass);
        for (int64_t c = 0; c < sh.d_h; ++c) {
          double want = 0;
          for (int64_t j = 0; j <= i; ++j) want += p[j] * v[(b * sh.seq + j) * ld + h * sh.d_h + c];
          worst = std::max(worst, std::abs(o[(b * sh.seq + i) * ld + h * sh.d_h + c] - want));
        }
      }
    }
  }
  EXPECT_LT(worst, 1e-11);
  // What tells the kinds apart: exact zeros (entmax only), mass below 1 (softmax1, sigmoid).
  EXPECT_EQ(zeros > 0, sh.kind == AttentionKind::kEntmax15) << zeros;
  EXPECT_EQ(mass_min < 1 - 1e-9, sh.kind == AttentionKind::kSoftmax1 || sh.kind == AttentionKind::kSigmoid);
}

TEST_P(AttentionKindTest, BackwardMatchesFiniteDifferencesIncludingTheScale) {
  // Two blocks.
  ExpectAttentionBackwardMatchesFiniteDifferences({1, 70, 2, 4, GetParam()}, 27, 1.2, {0.8, 1.4}, 5, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Kinds, AttentionKindTest,
                         ::testing::Values(AttentionKind::kSoftmax, AttentionKind::kSoftmax1, AttentionKind::kSsmax,
                                           AttentionKind::kSigmoid, AttentionKind::kEntmax15),
                         [](const auto& info) { return std::string(AttentionKindName(info.param)); });

// Sigmoid's bias in Ramapuram et al.'s form (issue 43): one b = −log n for every query, n
// the shape's sigmoid_bias_length (the training length), against the dense definition; the
// row statistic the backward reads is that bias; the backward against central differences.
// With sigmoid_bias_length 0 the per-query form: query 0's bias is −log 1 = 0.
TEST(AttentionTest, SigmoidWithABiasLengthAddsMinusLogOfItToEveryQuerysScores) {
  AttentionShape sh{1, 70, 2, 4, AttentionKind::kSigmoid};
  sh.sigmoid_bias_length = 50;
  const int64_t n = sh.batch * sh.seq * sh.heads * sh.d_h, ld = sh.heads * sh.d_h;
  const auto q = Random(n, 31, 1.5), k = Random(n, 32, 1.5), v = Random(n, 33);
  const double scale[2] = {0.6, 1.7};
  std::vector<double> o(n), stat(sh.heads * sh.seq);
  AttentionForward(sh, q.data(), k.data(), v.data(), scale, o.data(), stat.data());
  double worst = 0;
  for (int64_t h = 0; h < sh.heads; ++h) {
    for (int64_t i = 0; i < sh.seq; ++i) {
      EXPECT_DOUBLE_EQ(stat[h * sh.seq + i], -std::log(50.0));
      for (int64_t c = 0; c < sh.d_h; ++c) {
        double want = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < sh.d_h; ++e) dot += q[i * ld + h * sh.d_h + e] * k[j * ld + h * sh.d_h + e];
          want += v[j * ld + h * sh.d_h + c] / (1.0 + std::exp(-(scale[h] * dot - std::log(50.0))));
        }
        worst = std::max(worst, std::abs(o[i * ld + h * sh.d_h + c] - want));
      }
    }
  }
  EXPECT_LT(worst, 1e-12);
  // The per-query form: query 0 weighs its one key by σ(z), not σ(z − log 50).
  AttentionShape per_query = sh;
  per_query.sigmoid_bias_length = 0;
  std::vector<double> o2(n), stat2(sh.heads * sh.seq);
  AttentionForward(per_query, q.data(), k.data(), v.data(), scale, o2.data(), stat2.data());
  double dot0 = 0;
  for (int64_t e = 0; e < sh.d_h; ++e) dot0 += q[e] * k[e];
  EXPECT_NEAR(o2[0], v[0] / (1.0 + std::exp(-scale[0] * dot0)), 1e-14);
  EXPECT_EQ(stat2[0], 0.0);
  EXPECT_DOUBLE_EQ(stat2[49], -std::log(50.0));  // query 49 sees 50 keys: the two forms meet
  ExpectAttentionBackwardMatchesFiniteDifferences(sh, 27, 1.2, {0.8, 1.4}, 5, 1e-6);
}

TEST(RmsNormTest, ForwardHasUnitRmsTimesGainAndBackwardMatchesFiniteDifferences) {
  const int64_t rows = 5, d = 7;
  auto x = Random(rows * d, 11, 3.0), gain = Random(d, 12);
  const auto w = Random(rows * d, 13);
  std::vector<double> y(rows * d), rstd(rows);
  RmsNormForward(x.data(), static_cast<const double*>(nullptr), y.data(), rstd.data(), rows, d);
  for (int64_t r = 0; r < rows; ++r) {
    double sq = 0;
    for (int64_t c = 0; c < d; ++c) sq += y[r * d + c] * y[r * d + c];
    EXPECT_NEAR(sq / d, 1.0, 1e-6);  // ε = 1e-6 against mean x² ≈ 9
  }
  auto loss = [&] {
    RmsNormForward(x.data(), gain.data(), y.data(), rstd.data(), rows, d);
    return Dot(w, y);
  };
  loss();
  std::vector<double> dx(rows * d, 1.0), dgain(d, 0.0);
  RmsNormBackward(x.data(), gain.data(), rstd.data(), w.data(), dx.data(), dgain.data(), rows, d, false);
  ExpectClose(dx, NumericGrad(x, loss), 1e-7, "dx");
  ExpectClose(dgain, NumericGrad(gain, loss), 1e-7, "dgain");
}

TEST(RopeTest, KeepsNormsIsInvertedByItsInverseAndDependsOnRelativePositionOnly) {
  const int64_t T = 9, H = 2, dh = 6, ld = H * dh;
  // Every row the same q and the same k: after RoPE q_i·k_j depends on i − j only.
  const auto q0 = Random(ld, 14), k0 = Random(ld, 15);
  std::vector<double> q(T * ld), k(T * ld);
  for (int64_t t = 0; t < T; ++t) std::copy(q0.begin(), q0.end(), q.begin() + t * ld), std::copy(k0.begin(), k0.end(), k.begin() + t * ld);
  const auto q_in = q;
  Rope(q.data(), ld, 1, T, H, dh, false);
  Rope(k.data(), ld, 1, T, H, dh, false);
  for (int64_t c = 0; c < ld; ++c) EXPECT_EQ(q[c], q0[c]);  // position 0 is the identity
  auto dot = [&](int64_t i, int64_t j, int64_t h) {
    double s = 0;
    for (int64_t c = 0; c < dh; ++c) s += q[i * ld + h * dh + c] * k[j * ld + h * dh + c];
    return s;
  };
  for (int64_t h = 0; h < H; ++h) {
    EXPECT_NEAR(dot(5, 2, h), dot(7, 4, h), 1e-12);
    EXPECT_NEAR(dot(3, 3, h), dot(8, 8, h), 1e-12);
    EXPECT_GT(std::abs(dot(5, 2, h) - dot(5, 3, h)), 1e-6);  // it does depend on i − j
  }
  // The pair (0, 3) of head 0 at t = 1 turns by exactly 1 radian.
  EXPECT_NEAR(q[ld + 0], q0[0] * std::cos(1.0) - q0[3] * std::sin(1.0), 1e-15);
  Rope(q.data(), ld, 1, T, H, dh, true);
  for (int64_t i = 0; i < T * ld; ++i) EXPECT_NEAR(q[i], q_in[i], 1e-14);
}

TEST(AttentionWithRopeTest, TheTableOpIsRopeThenAttentionAndItsGradientsAreOfTheUnturnedQAndK) {
  // The table's op with RoPE (YaRN's frequencies, F = 4 over L = 4, so that the ramp
  // interpolates some pairs): o and lse those of cpu::Rope then cpu::AttentionForward, bit
  // for bit; dq, dk the gradients of Σ w·o with respect to the unturned q, k (central
  // differences), dv and d_scale the plain backward's of the turned q, k; q, k untouched.
  const AttentionShape sh{2, 7, 2, 6};
  const int64_t n = sh.batch * sh.seq * sh.heads * sh.d_h, ld = sh.heads * sh.d_h, stats = sh.batch * sh.heads * sh.seq;
  auto q = Random(n, 40), k = Random(n, 41);
  const auto v = Random(n, 42), w = Random(n, 43);
  const double scale[2] = {0.7, 1.3};
  const RopeScaling yarn{4.0, 4.0};
  CpuTransformerKernels<double> table;
  std::vector<double> o(n), lse(stats);
  table.AttentionForward(sh, q.data(), k.data(), v.data(), scale, o.data(), lse.data(), &yarn);
  std::vector<double> qt = q, kt = k, o_ref(n), lse_ref(stats);
  Rope(qt.data(), ld, sh.batch, sh.seq, sh.heads, sh.d_h, false, 0, yarn);
  Rope(kt.data(), ld, sh.batch, sh.seq, sh.heads, sh.d_h, false, 0, yarn);
  AttentionForward(sh, qt.data(), kt.data(), v.data(), scale, o_ref.data(), lse_ref.data());
  EXPECT_EQ(o, o_ref);
  EXPECT_EQ(lse, lse_ref);
  std::vector<double> dq(n), dk(n), dv(n), d_scale(2), dv_ref(n), dq_t(n), dk_t(n), d_scale_ref(2);
  const auto q_in = q, k_in = k;
  table.AttentionBackward(sh, q.data(), k.data(), v.data(), o.data(), lse.data(), w.data(), scale, dq.data(),
                          dk.data(), dv.data(), d_scale.data(), &yarn);
  EXPECT_EQ(q, q_in);
  EXPECT_EQ(k, k_in);
  AttentionBackward(sh, qt.data(), kt.data(), v.data(), o_ref.data(), lse_ref.data(), w.data(), scale, dq_t.data(),
                    dk_t.data(), dv_ref.data(), d_scale_ref.data());
  EXPECT_EQ(dv, dv_ref);
  EXPECT_EQ(d_scale, d_scale_ref);
  auto loss = [&] {
    std::vector<double> out(n), stat(stats);
    CpuTransformerKernels<double> fresh;
    fresh.AttentionForward(sh, q.data(), k.data(), v.data(), scale, out.data(), stat.data(), &yarn);
    return Dot(w, out);
  };
  ExpectClose(dq, NumericGrad(q, loss), 1e-7, "dq");
  ExpectClose(dk, NumericGrad(k, loss), 1e-7, "dk");
}

TEST(SwiGluTest, ForwardIsSiluTimesUpAndBackwardMatchesFiniteDifferences) {
  const int64_t rows = 3, f = 5;
  auto gu = Random(rows * 2 * f, 16, 2.0);
  const auto w = Random(rows * f, 17);
  std::vector<double> h(rows * f);
  SwiGluForward(gu.data(), h.data(), rows, f);
  const double a = gu[1], u = gu[f + 1];
  EXPECT_NEAR(h[1], a / (1 + std::exp(-a)) * u, 1e-15);
  auto loss = [&] {
    SwiGluForward(gu.data(), h.data(), rows, f);
    return Dot(w, h);
  };
  std::vector<double> dgu(rows * 2 * f);
  SwiGluBackward(gu.data(), w.data(), dgu.data(), rows, f);
  ExpectClose(dgu, NumericGrad(gu, loss), 1e-7, "dgu");
}

}  // namespace
}  // namespace multiscreen::kernels::cpu
