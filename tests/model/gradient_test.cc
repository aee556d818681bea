// Every parameter's gradient against central finite differences, in double
// precision, on tiny models whose windows are shorter than the sequence.
#include <gtest/gtest.h>

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
};

class GradientTest : public ::testing::TestWithParam<GradCase> {};

TEST_P(GradientTest, EveryParameterMatchesCentralDifferences) {
  const GradCase c = GetParam();
  const ModelDims dims = TinyDims(c.model, c.pl_norm);
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
                                           GradCase{"tiny_psi4", true, 2, 20, 13, 9}));

}  // namespace
}  // namespace multiscreen
