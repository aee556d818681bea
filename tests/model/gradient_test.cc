// Every parameter's gradient against central finite differences, in double
// precision, on tiny models whose windows are shorter than the sequence, with PLNorm
// and TanhNorm (the ablation switch tanh_norm, issue 18) each on and off.
#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include <cmath>

#include "model/multiscreen.h"
#include "tests/model/test_model.h"

namespace multiscreen {
namespace {

using testing::PerturbedParams;
using testing::RandomTokens;
using testing::TinyDims;

struct GradCase {
  const char* model;
  bool pl_norm;
  int64_t B, T;
  uint64_t seed;
  int64_t matrix_stride;  // check every n-th element of each matrix (all scalars always)
  bool tanh_norm = true;
};

// How a case shows in gtest's output (issue 31: "56-byte object <04-00 24-E9 …>").
void PrintTo(const GradCase& c, std::ostream* os) {
  *os << c.model << (c.pl_norm ? " PLNorm" : " no PLNorm") << (c.tanh_norm ? " TanhNorm" : " no TanhNorm") << " B="
      << c.B << " T=" << c.T << " seed=" << c.seed << " stride=" << c.matrix_stride;
}

class GradientTest : public ::testing::TestWithParam<GradCase> {};

TEST_P(GradientTest, EveryParameterMatchesCentralDifferences) {
  const GradCase c = GetParam();
  ModelDims dims = TinyDims(c.model, c.pl_norm);
  dims.tanh_norm = c.tanh_norm;
  Multiscreen<double> model(dims, ShardSpec::Full(dims));
  const ParamLayout& layout = model.layout();
  std::vector<double> p = PerturbedParams<double>(layout, c.seed);
  const auto tokens = RandomTokens(dims.vocab, c.B * (c.T + 1), c.seed + 1);
  std::vector<double> grads(layout.size(), 0.0);
  model.ForwardBackward(p.data(), tokens.data(), c.B, c.T, grads.data());

  // Windows must be shorter than T for some tiles, or the s_w checks would not
  // exercise Softmask's window.
  int short_windows = 0;
  for (const ParamEntry& e : layout.entries()) {
    if (e.kind != ParamKind::kS_w) continue;
    for (int64_t i = 0; i < e.size(); ++i) short_windows += std::exp(p[e.buffer_offset + i]) + 1 < c.T;
  }
  ASSERT_GT(short_windows, 0);

  const double h = 1e-6;
  int checked = 0;
  for (const ParamEntry& e : layout.entries()) {
    // Every scalar; every matrix_stride-th element of the matrices (W_E sparser).
    const int64_t stride = e.is_scalar() ? 1 : e.kind == ParamKind::kW_E ? 7 * c.matrix_stride : c.matrix_stride;
    for (int64_t i = 0; i < e.size(); i += stride) {
      double& x = p[e.buffer_offset + i];
      const double saved = x;
      x = saved + h;
      const double up = model.Loss(p.data(), tokens.data(), c.B, c.T);
      x = saved - h;
      const double down = model.Loss(p.data(), tokens.data(), c.B, c.T);
      x = saved;
      const double fd = (up - down) / (2 * h);
      const double analytic = grads[e.buffer_offset + i];
      EXPECT_NEAR(analytic, fd, 2e-7 + 1e-5 * std::abs(fd)) << e.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
}

INSTANTIATE_TEST_SUITE_P(Tiny, GradientTest,
                         ::testing::Values(GradCase{"tiny_psi2", true, 2, 12, 11, 1},
                                           GradCase{"tiny_psi2", false, 2, 12, 12, 1},
                                           GradCase{"tiny_psi4", true, 2, 20, 13, 9},
                                           GradCase{"tiny_psi2", true, 2, 12, 14, 1, false},
                                           GradCase{"tiny_psi2", false, 2, 12, 15, 1, false}),
                         [](const ::testing::TestParamInfo<GradCase>& info) {
                           const GradCase& c = info.param;
                           return std::string(c.model) + (c.pl_norm ? "_PLNorm" : "") + (c.tanh_norm ? "" : "_NoTanhNorm") +
                                  "_seed" + std::to_string(c.seed);
                         });

// The switch changes the model: the same parameters give another (finite) loss with
// TanhNorm off, so the finite-difference cases above cannot pass by ignoring it.
TEST(TanhNormSwitchTest, OffChangesTheLoss) {
  ModelDims on = TinyDims("tiny_psi2"), off = on;
  off.tanh_norm = false;
  Multiscreen<double> model_on(on, ShardSpec::Full(on)), model_off(off, ShardSpec::Full(off));
  const std::vector<double> p = PerturbedParams<double>(model_on.layout(), 21);
  const auto tokens = RandomTokens(on.vocab, 2 * 13, 22);
  const double loss_on = model_on.Loss(p.data(), tokens.data(), 2, 12);
  const double loss_off = model_off.Loss(p.data(), tokens.data(), 2, 12);
  EXPECT_TRUE(std::isfinite(loss_off));
  EXPECT_GT(std::abs(loss_on - loss_off), 1e-6 * std::abs(loss_on));
}

}  // namespace
}  // namespace multiscreen
