// The CPU's fused head on whole rows (kernels/cpu/head_loss.h: HeadPath::kBlas in fp32, and
// the bf16 head) against plain loops in double, on a vocabulary of several of the backward
// products' blocks (4096 entries) and a partial one, in two chunks of rows: the loss terms,
// dy, and ∂Ē added to what it held. The panel head (HeadPath::kPanels, PLNorm's fixed shift)
// likewise over 18 blocks of panels and three chunks, and bit for bit the same on 1, 2 and 3
// threads. The model's tests (tests/model/head_test.cc) use vocabularies below one block.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/head_loss.h"
#include "tests/kernels/isa_test.h"

namespace multiscreen::kernels::cpu {
namespace {

constexpr int64_t kRows = 24, kDe = 32, kVocab = 9000;

struct HeadResult {
  std::vector<double> lse, target_logit, dy, d_e_bar;
};

// The head of y [kRows, kDe], Ē [kVocab, kDe] in double: z = scale · y Ēᵀ, lse, the target's
// logit, g = coef · scale · (softmax − onehot), dy = g Ē, ∂Ē = d_e_bar0 + gᵀ y.
HeadResult Reference(const std::vector<float>& y, const std::vector<float>& e_bar, const std::vector<int64_t>& target,
                     double scale, double coef, const std::vector<float>& d_e_bar0) {
  HeadResult out{std::vector<double>(kRows), std::vector<double>(kRows), std::vector<double>(kRows * kDe, 0.0),
                 std::vector<double>(d_e_bar0.begin(), d_e_bar0.end())};
  std::vector<double> z(kVocab);
  for (int64_t r = 0; r < kRows; ++r) {
    double m = -INFINITY;
    for (int64_t v = 0; v < kVocab; ++v) {
      double dot = 0;
      for (int64_t j = 0; j < kDe; ++j) dot += double(y[r * kDe + j]) * e_bar[v * kDe + j];
      z[v] = scale * dot;
      m = std::max(m, z[v]);
    }
    double sum = 0;
    for (int64_t v = 0; v < kVocab; ++v) sum += std::exp(z[v] - m);
    out.lse[r] = m + std::log(sum);
    out.target_logit[r] = target[r] >= 0 ? z[target[r]] : 0.0;  // an ignored row: no target term
    for (int64_t v = 0; v < kVocab; ++v) {
      const double g = coef * scale * (std::exp(z[v] - out.lse[r]) - (v == target[r] ? 1.0 : 0.0));
      for (int64_t j = 0; j < kDe; ++j) {
        out.dy[r * kDe + j] += g * e_bar[v * kDe + j];
        out.d_e_bar[v * kDe + j] += g * y[r * kDe + j];
      }
    }
  }
  return out;
}

// Each of got within tolerance · max|want| of want.
void ExpectClose(const std::vector<double>& got, const std::vector<double>& want, double tolerance, const char* what) {
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tolerance * scale) << what << " [" << i << "] on " << IsaName(ActiveIsa());
  }
}

// What each row v of ∂Ē gained, got − d_e_bar0, within tolerance · max_j |want − d_e_bar0|
// of row v: a row off the targets gains only Σ_r g_rv y_r, some 10⁻⁵ here, which a check
// against ∂Ē's largest entry would not see missing (a vocabulary block or a chunk's rows).
void ExpectRowIncrementsClose(const std::vector<double>& got, const std::vector<double>& want,
                              const std::vector<float>& d_e_bar0, double tolerance) {
  for (int64_t v = 0; v < kVocab; ++v) {
    double scale = 0;
    for (int64_t j = 0; j < kDe; ++j) scale = std::max(scale, std::fabs(want[v * kDe + j] - d_e_bar0[v * kDe + j]));
    for (int64_t j = 0; j < kDe; ++j) {
      const int64_t i = v * kDe + j;
      // got is fp32 ∂Ē: its rounding, half an ulp of |∂Ē|, beside the increment's tolerance.
      const double ulp = std::ldexp(std::fabs(want[i]), -23);
      ASSERT_NEAR(got[i] - d_e_bar0[i], want[i] - d_e_bar0[i], tolerance * scale + 2 * ulp)
          << "d_e_bar's increment, vocabulary entry " << v << ", column " << j << " on " << IsaName(ActiveIsa());
    }
  }
}

// Unit rows of width kDe (PLNorm's y and Ē, so that |z| ≤ scale and the fixed shift holds).
std::vector<float> UnitRows(int64_t rows, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> m(rows * kDe);
  for (int64_t r = 0; r < rows; ++r) {
    double norm = 0;
    for (int64_t j = 0; j < kDe; ++j) norm += double(m[r * kDe + j] = normal(rng)) * m[r * kDe + j];
    for (int64_t j = 0; j < kDe; ++j) m[r * kDe + j] /= float(std::sqrt(norm));
  }
  return m;
}

// FusedHead<float>'s whole-row head under `precision` against Reference, with the operands
// Reference sees rounded as that precision rounds them (bf16: y and Ē).
void CheckWholeRows(Precision precision, double tolerance, double increment_tolerance) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.f, 0.2f);
  std::vector<float> y(kRows * kDe), e_bar(kVocab * kDe), d_e_bar(kVocab * kDe);
  for (float& x : y) x = normal(rng);
  for (float& x : e_bar) x = normal(rng);
  for (float& x : d_e_bar) x = normal(rng);
  const std::vector<float> d_e_bar0 = d_e_bar;
  std::vector<int64_t> target(kRows);
  for (int64_t r = 0; r < kRows; ++r) target[r] = (r * 4099 + 7) % kVocab;  // some in each block
  const float scale = 3.f, coef = 1.f / kRows;

  PackedOperand<float> e16;
  std::vector<float> y_seen = y, e_seen = e_bar;
  if (precision == Precision::kBf16) {
    std::vector<uint16_t> y_bits(y.size());
    ToBf16(y.data(), int64_t(y.size()), y_bits.data(), y_seen.data());
    e16.precision = Precision::kBf16;
    e16.size = kVocab * kDe;
    e16.half.Resize(kVocab * kDe);
    ToBf16(e_bar.data(), kVocab * kDe, e16.half.data(), e_seen.data());
  }
  const HeadResult want = Reference(y_seen, e_seen, target, scale, coef, d_e_bar);

  KernelOptions options;
  options.head_path = HeadPath::kBlas;
  options.head_chunk_rows = 16;  // two chunks: 16 rows, then 8
  options.precision = precision;
  FusedHead<float> head(options);
  head.Prepare(e_bar.data(), kVocab, kDe);
  HeadResult got{std::vector<double>(kRows), std::vector<double>(kRows), {}, {}};
  std::vector<float> dy(kRows * kDe, NAN);
  HeadLossArgs<float> a;
  a.y = y.data();
  a.e_bar = e_bar.data();
  a.rows = kRows;
  a.vocab = kVocab;
  a.d_e = kDe;
  a.scale = scale;
  a.shift = NAN;  // each row's max
  a.target = target.data();
  a.coef = coef;
  a.lse = got.lse.data();
  a.target_logit = got.target_logit.data();
  a.dy = dy.data();
  a.d_e_bar = d_e_bar.data();
  a.precision = precision;
  a.e_bar_packed = precision == Precision::kBf16 ? &e16 : nullptr;
  head.Run(a);
  got.dy.assign(dy.begin(), dy.end());
  got.d_e_bar.assign(d_e_bar.begin(), d_e_bar.end());

  ExpectClose(got.lse, want.lse, tolerance, "lse");
  ExpectClose(got.target_logit, want.target_logit, tolerance, "target_logit");
  ExpectClose(got.dy, want.dy, tolerance, "dy");
  ExpectClose(got.d_e_bar, want.d_e_bar, tolerance, "d_e_bar");
  ExpectRowIncrementsClose(got.d_e_bar, want.d_e_bar, d_e_bar0, increment_tolerance);
}

class HeadWholeRowsTest : public IsaTest {};
MS_INSTANTIATE_ON_EVERY_ISA(HeadWholeRowsTest);

TEST_P(HeadWholeRowsTest, Fp32MatchesPlainLoopsAcrossVocabularyBlocks) { CheckWholeRows(Precision::kFp32, 1e-5, 1e-4); }

// The bf16 head rounds the softmax's numerators and c/Σ ⊙ y to bf16 as well (2^-9 relative
// each), which the reference does not: a tolerance of a few bf16 roundings; ∂Ē's rows off the
// targets (sums of 24 rounded terms of both signs, up to 1.3 % off their largest entry) within 5 %.
TEST_P(HeadWholeRowsTest, Bf16MatchesPlainLoopsOnRoundedOperandsAcrossVocabularyBlocks) {
  CheckWholeRows(Precision::kBf16, 1e-2, 5e-2);
}

// The panel head of unit y, Ē with PLNorm's shift on `threads` OpenMP threads: chunks of 10
// rows (10, 10, 4: dy's 320 and 128 elements are not whole ranges of the threads' sums),
// blocks of 16 panels (18 blocks, the last of 10 panels, its last panel 8 entries), rows
// that share a target and rows without one. Fills got (lse, target_logit, dy, ∂Ē).
void RunPanels(int threads, const std::vector<float>& y, const std::vector<float>& e_bar,
               const std::vector<int64_t>& target, float scale, float coef, const std::vector<float>& d_e_bar0,
               HeadResult* got) {
  KernelOptions options;
  options.head_path = HeadPath::kPanels;
  options.head_chunk_rows = 10;
  options.head_vocab_block = 512;
  FusedHead<float> head(options);
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(threads);
  head.Prepare(e_bar.data(), kVocab, kDe);
  got->lse.assign(kRows, NAN);
  got->target_logit.assign(kRows, NAN);
  std::vector<float> dy(kRows * kDe, NAN), d_e_bar = d_e_bar0;
  HeadLossArgs<float> a;
  a.y = y.data();
  a.e_bar = e_bar.data();
  a.rows = kRows;
  a.vocab = kVocab;
  a.d_e = kDe;
  a.scale = scale;
  a.shift = 1.01 * scale;  // the model's fixed shift under PLNorm
  a.target = target.data();
  a.coef = coef;
  a.lse = got->lse.data();
  a.target_logit = got->target_logit.data();
  a.dy = dy.data();
  a.d_e_bar = d_e_bar.data();
  head.Run(a);
  omp_set_num_threads(saved_threads);
  got->dy.assign(dy.begin(), dy.end());
  got->d_e_bar.assign(d_e_bar.begin(), d_e_bar.end());
}

// Elements of a and b whose bits differ (NaN against NaN counts as equal bits only if equal).
int64_t DifferingBits(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return int64_t(std::max(a.size(), b.size()));
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(double)) != 0;
  return n;
}

class HeadPanelsFusedTest : public IsaTest {};
MS_INSTANTIATE_ON_EVERY_ISA(HeadPanelsFusedTest);

// The panel head against plain loops, and the same bits whatever the thread count: blocks of
// panels, dy's block sums, the row statistics and the one-hot terms are split among threads
// by fixed ranges, each element summed in one fixed order (docs/performance.md, issue 44).
TEST_P(HeadPanelsFusedTest, MatchesPlainLoopsAndKeepsItsBitsOnAnyThreadCount) {
  std::mt19937 rng(23);
  const std::vector<float> y = UnitRows(kRows, rng), e_bar = UnitRows(kVocab, rng);
  std::normal_distribution<float> normal(0.f, 0.2f);
  std::vector<float> d_e_bar0(kVocab * kDe);
  for (float& x : d_e_bar0) x = normal(rng);
  std::vector<int64_t> target(kRows);
  for (int64_t r = 0; r < kRows; ++r) target[r] = (r * 4099 + 7) % kVocab;
  for (int64_t r : {3, 9, 10, 21}) target[r] = 8998;  // one entry of the last panel, in three chunks
  target[5] = -1;                                      // a row without a target
  target[14] = target[2];
  const float scale = 6.f, coef = 1.f / kRows;
  const HeadResult want = Reference(y, e_bar, target, scale, coef, d_e_bar0);

  HeadResult one;
  RunPanels(1, y, e_bar, target, scale, coef, d_e_bar0, &one);
  ExpectClose(one.lse, want.lse, 1e-5, "lse");
  ExpectClose(one.target_logit, want.target_logit, 1e-5, "target_logit");
  ExpectClose(one.dy, want.dy, 1e-5, "dy");
  ExpectClose(one.d_e_bar, want.d_e_bar, 1e-5, "d_e_bar");
  ExpectRowIncrementsClose(one.d_e_bar, want.d_e_bar, d_e_bar0, 1e-4);
  for (int threads : {2, 3}) {
    HeadResult many;
    RunPanels(threads, y, e_bar, target, scale, coef, d_e_bar0, &many);
    EXPECT_EQ(DifferingBits(many.lse, one.lse), 0) << threads << " threads, lse";
    EXPECT_EQ(DifferingBits(many.target_logit, one.target_logit), 0) << threads << " threads, target_logit";
    EXPECT_EQ(DifferingBits(many.dy, one.dy), 0) << threads << " threads, dy";
    EXPECT_EQ(DifferingBits(many.d_e_bar, one.d_e_bar), 0) << threads << " threads, d_e_bar";
  }
}

}  // namespace
}  // namespace multiscreen::kernels::cpu
