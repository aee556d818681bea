// Every parameter's gradient against central finite differences, in double
// precision, on tiny models whose windows are shorter than the sequence, with PLNorm
// and TanhNorm (the ablation switch tanh_norm, issue 18) each on and off, and the
// ablation switches of issue 30: position NOPE and ROPE, the output gate off.
#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include <cmath>

#include "model/model_stage.h"
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
  kernels::PositionKind position = kernels::PositionKind::kMipe;
  bool output_gate = true;
};

// How a case shows in gtest's output (issue 31: "56-byte object <04-00 24-E9 …>").
void PrintTo(const GradCase& c, std::ostream* os) {
  *os << c.model << (c.pl_norm ? " PLNorm" : " no PLNorm") << (c.tanh_norm ? " TanhNorm" : " no TanhNorm") << " position="
      << kernels::PositionKindName(c.position) << (c.output_gate ? "" : " no gate") << " B=" << c.B << " T=" << c.T << " seed=" << c.seed << " stride=" << c.matrix_stride;
}

class GradientTest : public ::testing::TestWithParam<GradCase> {};

TEST_P(GradientTest, EveryParameterMatchesCentralDifferences) {
  const GradCase c = GetParam();
  ModelDims dims = TinyDims(c.model, c.pl_norm);
  dims.tanh_norm = c.tanh_norm;
  dims.position = c.position;
  dims.output_gate = c.output_gate;
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
                                           GradCase{"tiny_psi2", false, 2, 12, 15, 1, false},
                                           GradCase{"tiny_psi2", true, 2, 12, 16, 1, true, kernels::PositionKind::kNope},
                                           GradCase{"tiny_psi2", true, 2, 12, 17, 1, true, kernels::PositionKind::kRope},
                                           GradCase{"tiny_psi4", true, 2, 20, 18, 9, true, kernels::PositionKind::kRope},
                                           GradCase{"tiny_psi2", true, 2, 12, 19, 1, true, kernels::PositionKind::kMipe,
                                                    false},
                                           GradCase{"tiny_psi2", false, 2, 12, 20, 1, false,
                                                    kernels::PositionKind::kRope, false}),
                         [](const ::testing::TestParamInfo<GradCase>& info) {
                           const GradCase& c = info.param;
                           return std::string(c.model) + (c.pl_norm ? "_PLNorm" : "") + (c.tanh_norm ? "" : "_NoTanhNorm") +
                                  (c.position == kernels::PositionKind::kMipe ? "" : c.position == kernels::PositionKind::kNope ? "_NoPE" : "_RoPE") +
                                  (c.output_gate ? "" : "_NoGate") + "_seed" + std::to_string(c.seed);
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

// NOPE and ROPE change the model (on tiles whose w is below w_th MiPE turns q̄, k̄ by
// another angle, NOPE not at all, ROPE every pair), and the gateless model is not the
// gated one with W_G ignored: the same W_Q, W_K, W_V, W_O, scalars give another loss.
TEST(PositionAndGateSwitchTest, EachChangesTheLoss) {
  const ModelDims mipe = TinyDims("tiny_psi2");
  Multiscreen<double> model(mipe, ShardSpec::Full(mipe));
  std::vector<double> p = PerturbedParams<double>(model.layout(), 23);
  for (const ParamEntry& e : model.layout().entries()) {  // tile 0 of each layer: w = 3 < w_th, MiPE turns
    if (e.kind == ParamKind::kS_w) p[e.buffer_offset] = std::log(2.0);
  }
  const auto tokens = RandomTokens(mipe.vocab, 2 * 13, 24);
  const double loss_mipe = model.Loss(p.data(), tokens.data(), 2, 12);
  for (kernels::PositionKind kind : {kernels::PositionKind::kNope, kernels::PositionKind::kRope}) {
    ModelDims other = mipe;
    other.position = kind;
    Multiscreen<double> variant(other, ShardSpec::Full(other));
    const double loss = variant.Loss(p.data(), tokens.data(), 2, 12);
    EXPECT_TRUE(std::isfinite(loss));
    EXPECT_GT(std::abs(loss - loss_mipe), 1e-6 * std::abs(loss_mipe)) << kernels::PositionKindName(kind);
  }
  ModelDims gateless = mipe;
  gateless.output_gate = false;
  Multiscreen<double> no_gate(gateless, ShardSpec::Full(gateless));
  std::vector<double> q;  // the gated parameters less every W_G
  for (const ParamEntry& e : model.layout().entries()) {
    if (e.kind != ParamKind::kW_G) q.insert(q.end(), p.begin() + e.buffer_offset, p.begin() + e.buffer_offset + e.size());
  }
  ASSERT_EQ(static_cast<int64_t>(q.size()), no_gate.layout().size());
  const double loss = no_gate.Loss(q.data(), tokens.data(), 2, 12);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_GT(std::abs(loss - loss_mipe), 1e-6 * std::abs(loss_mipe));
}

// A window so large that w = e^{s_w} + 1 overflows to ∞ (s_w = 1000 in a weights file or
// checkpoint): Softmask is then the plain causal mask and ∂L/∂s_w its limit, 0 (it was
// ∂L/∂w · (w − 1) = 0 · ∞ = NaN, written by `forward` with exit code 0). Every other
// gradient is that of a window merely huge (s_w = 100, w ≈ 2.7·10⁴³: a mask of exactly 1
// on these lengths), bit for bit; that window's own s_w gradient is ~0 too.
template <typename Real>
void ExpectAnOverflowingWindowGivesItsLimit(const ModelDims& dims, std::vector<Real> p) {
  SCOPED_TRACE(dims.name);
  auto model = MakeModelStage<Real>(dims, ShardSpec::Full(dims));
  const ParamLayout& layout = model->layout();
  const int64_t B = 2, T = 12;
  const auto tokens = RandomTokens(dims.vocab, B * (T + 1), 31);
  auto gradients = [&](Real s_w) {
    for (const ParamEntry& e : layout.entries()) {
      if (e.kind == ParamKind::kS_w) p[e.buffer_offset] = s_w;  // tile (head) 0 of every layer
    }
    std::vector<Real> g(layout.size(), Real(0));
    EXPECT_TRUE(std::isfinite(model->ForwardBackward(p.data(), tokens.data(), B, T, g.data())));
    return g;
  };
  const std::vector<Real> overflow = gradients(Real(1000)), huge = gradients(Real(100));
  int windows = 0;
  for (const ParamEntry& e : layout.entries()) {
    for (int64_t i = 0; i < e.size(); ++i) {
      const int64_t at = e.buffer_offset + i;
      ASSERT_TRUE(std::isfinite(overflow[at])) << e.name << "[" << i << "]";
      if (e.kind == ParamKind::kS_w && i == 0) {
        EXPECT_EQ(overflow[at], Real(0)) << e.name;
        EXPECT_LT(std::abs(huge[at]), 1e-30) << e.name;
        ++windows;
      } else {
        EXPECT_EQ(overflow[at], huge[at]) << e.name << "[" << i << "]";
      }
    }
  }
  EXPECT_EQ(windows, dims.n_layers);
}

TEST(OverflowingWindowTest, GivesTheCausalMaskAndAZeroWindowGradient) {
  const ModelDims multiscreen = TinyDims("tiny_psi2");
  const ParamLayout layout(multiscreen, ShardSpec::Full(multiscreen));
  ExpectAnOverflowingWindowGivesItsLimit(multiscreen, PerturbedParams<double>(layout, 30));
  ExpectAnOverflowingWindowGivesItsLimit(multiscreen, PerturbedParams<float>(layout, 30));
  // The Transformer's screening heads map their s_w the same way.
  const ModelDims screening = TinyDims("tiny_transformer_screening");
  const ParamLayout heads(screening, ShardSpec::Full(screening));
  ExpectAnOverflowingWindowGivesItsLimit(screening, testing::PerturbedTransformerParams<double>(heads, 32));
  ExpectAnOverflowingWindowGivesItsLimit(screening, testing::PerturbedTransformerParams<float>(heads, 32));
}

}  // namespace
}  // namespace multiscreen
