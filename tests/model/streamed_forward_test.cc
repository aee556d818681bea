// model/streamed_forward.h: the loss of the model built one stage at a time (embedding,
// each layer alone, head) equals ModelStage::ForwardBackward's — the loss and every
// per-token loss bit for bit — for Multiscreen (PLNorm on and off: the panel and the
// BLAS head; fp32, bf16, fp64; scalars perturbed so that windows, Trim and MiPE vary)
// and the Transformer baseline; the loader sees each stage's layout once, in order, and
// its error ends the forward.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "model/model_stage.h"
#include "model/streamed_forward.h"
#include "tests/model/test_model.h"

namespace multiscreen {
namespace {

using testing::PerturbedParams;
using testing::RandomTokens;
using testing::TinyDims;

// Copies a stage's tensors out of the whole model's buffer by name (a loader that
// reads nothing from disk), recording each stage's first tensor.
template <typename Real>
StageLoader<Real> FromMemory(const ParamLayout& full, const std::vector<Real>& params, std::vector<std::string>* seen) {
  return [&full, &params, seen](const ParamLayout& layout, Real* out) {
    seen->push_back(layout.entries().front().name);
    for (const ParamEntry& e : layout.entries()) {
      const ParamEntry* whole = full.Find(e.name);
      if (whole == nullptr || whole->global_shape != e.shape) return absl::InternalError("no " + e.name);
      std::copy(params.begin() + whole->buffer_offset, params.begin() + whole->buffer_offset + e.size(),
                out + e.buffer_offset);
    }
    return absl::OkStatus();
  };
}

template <typename Real>
void ExpectSameBits(const ModelDims& dims, Precision precision, int64_t B, int64_t T, uint64_t seed) {
  const ParamLayout full(dims, ShardSpec::Full(dims));
  const std::vector<Real> params = PerturbedParams<Real>(full, seed);
  const std::vector<int32_t> tokens = RandomTokens(dims.vocab, B * (T + 1), seed + 1);
  ModelOptions options;
  options.precision = precision;
  auto model = MakeModelStage<Real>(dims, ShardSpec::Full(dims), options);
  std::vector<Real> grads(full.size(), Real(0)), want(B * T), got(B * T);
  const double loss = model->ForwardBackward(params.data(), tokens.data(), B, T, grads.data(), want.data());
  std::vector<std::string> seen;
  auto streamed = StreamedLoss<Real>(dims, options, FromMemory(full, params, &seen), tokens.data(), B, T, got.data());
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  EXPECT_EQ(std::memcmp(&loss, &*streamed, sizeof(double)), 0) << loss << " vs " << *streamed;
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(Real)), 0);
  for (int64_t i = 0; i < B * T; ++i) ASSERT_EQ(want[i], got[i]) << "token " << i;
  // Embedding, each layer, head: each stage loaded once, in order.
  ASSERT_EQ(int64_t(seen.size()), dims.n_layers + 2);
  EXPECT_EQ(seen.front(), "embed/W_E");
  for (int64_t l = 0; l < dims.n_layers; ++l) EXPECT_EQ(seen[1 + l].rfind(ParamLayout::LayerPrefix(l), 0), 0u);
  EXPECT_EQ(seen.back(), "embed/W_E");
}

TEST(StreamedForwardTest, MultiscreenMatchesForwardBackwardBitForBit) {
  for (const char* name : {"tiny_psi2", "tiny_psi4"}) {
    for (bool pl_norm : {true, false}) {
      SCOPED_TRACE(std::string(name) + (pl_norm ? " PLNorm" : " no PLNorm"));
      const ModelDims dims = TinyDims(name, pl_norm);
      ExpectSameBits<float>(dims, Precision::kFp32, 2, 24, 11);
      ExpectSameBits<float>(dims, Precision::kBf16, 3, 17, 12);
      ExpectSameBits<double>(dims, Precision::kFp32, 2, 20, 13);
    }
  }
}

TEST(StreamedForwardTest, TransformerMatchesForwardBackwardBitForBit) {
  ModelDims dims = *LoadModel("tiny_transformer");
  ExpectSameBits<float>(dims, Precision::kFp32, 2, 16, 21);
  ExpectSameBits<double>(dims, Precision::kFp32, 1, 19, 22);
}

TEST(StreamedForwardTest, TheLoadersErrorEndsTheForward) {
  const ModelDims dims = TinyDims("tiny_psi2");
  const std::vector<int32_t> tokens = RandomTokens(dims.vocab, 2 * 9, 3);
  int calls = 0;
  const StageLoader<float> failing = [&calls](const ParamLayout& layout, float*) {
    return ++calls == 2 ? absl::DataLossError("W.h5: cannot read rows of " + layout.entries().front().name)
                        : absl::OkStatus();
  };
  auto loss = StreamedLoss<float>(dims, ModelOptions{}, failing, tokens.data(), 2, 8, nullptr);
  ASSERT_FALSE(loss.ok());
  EXPECT_EQ(loss.status().message(), "W.h5: cannot read rows of layers/000/W_Q");
  EXPECT_EQ(calls, 2);
}

TEST(StreamedForwardTest, StagesCoverTheModelOnce) {
  const ModelDims dims = TinyDims("tiny_psi4");
  const ParamLayout full(dims, ShardSpec::Full(dims));
  int64_t total = ParamLayout(dims, EmbedStage(dims)).size() + ParamLayout(dims, HeadStage(dims)).size();
  for (int64_t l = 0; l < dims.n_layers; ++l) total += ParamLayout(dims, LayerStage(dims, l)).size();
  // W_E is read by both ends (tied): the stages hold the model plus one more table.
  EXPECT_EQ(total, full.size() + dims.vocab * dims.d_e);
  // The estimate: at least the largest stage twice, and Ψ = 64's is the tied table's
  // three copies (about 2.3 GiB at B = 1, T = 16).
  EXPECT_GE(StreamedLossBytes(dims, 1, 16, 4), 8 * ParamLayout(dims, LayerStage(dims, 0)).size());
  const ModelDims psi64 = *LoadModel("psi64");
  const double gib = double(StreamedLossBytes(psi64, 1, 16, 4)) / double(int64_t{1} << 30);
  EXPECT_GT(gib, 2.2);
  EXPECT_LT(gib, 2.5);
}

}  // namespace
}  // namespace multiscreen
