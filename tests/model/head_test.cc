// The fused head (HeadLoss with gradients on one vocabulary): however the rows are
// chunked and the vocabulary split into blocks, and whether the softmax shift is the
// PLNorm bound or each row's max, the loss and every gradient are the same.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/multiscreen.h"
#include "tests/model/test_model.h"

namespace multiscreen {
namespace {

using testing::PerturbedParams;
using testing::RandomTokens;
using testing::TinyDims;

struct Result {
  double loss;
  std::vector<double> grads;
};

Result StepOf(const ModelDims& dims, ModelOptions options, const std::vector<double>& params,
           const std::vector<int32_t>& tokens, int64_t B, int64_t T) {
  Multiscreen<double> model(dims, ShardSpec::Full(dims), options);
  Result r{0, std::vector<double>(params.size(), 0.0)};
  r.loss = model.ForwardBackward(params.data(), tokens.data(), B, T, r.grads.data());
  return r;
}

void ExpectSame(const Result& a, const Result& b) {
  EXPECT_NEAR(a.loss, b.loss, 1e-13 * std::abs(b.loss));
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.grads.size(); ++i) {
    diff += (a.grads[i] - b.grads[i]) * (a.grads[i] - b.grads[i]);
    norm += b.grads[i] * b.grads[i];
  }
  EXPECT_LT(std::sqrt(diff), 1e-12 * std::sqrt(norm));
}

TEST(HeadTest, VocabularyBlocksAndRowChunksGiveTheSameLossAndGradients) {
  const ModelDims dims = TinyDims("tiny_psi4");  // V = 37
  Multiscreen<double> shape_only(dims, ShardSpec::Full(dims));
  const auto params = PerturbedParams<double>(shape_only.layout(), 51);
  const int64_t B = 3, T = 11;
  const auto tokens = RandomTokens(dims.vocab, B * (T + 1), 52);
  const Result whole = StepOf(dims, ModelOptions{}, params, tokens, B, T);
  for (int64_t block : {1, 5, 36}) {
    for (int64_t chunk : {4, 33}) {
      ModelOptions options;
      options.head_vocab_block = block;
      options.head_chunk_rows = chunk;
      SCOPED_TRACE(::testing::Message() << "block " << block << ", chunk " << chunk);
      ExpectSame(StepOf(dims, options, params, tokens, B, T), whole);
    }
  }
}

void CheckBothShifts(const ModelDims& dims) {
  Multiscreen<double> shape_only(dims, ShardSpec::Full(dims));
  auto params = PerturbedParams<double>(shape_only.layout(), 53);
  const int64_t B = 2, T = 9;
  const auto tokens = RandomTokens(dims.vocab, B * (T + 1), 54);
  const int64_t s_f = shape_only.layout().Find("head/s_F")->buffer_offset;
  for (double scale : {5.0, 60.0}) {  // bound shift, then row-max shift
    params[s_f] = std::log(scale);
    ModelOptions blocked;
    blocked.head_vocab_block = 4;
    const Result a = StepOf(dims, blocked, params, tokens, B, T);
    const Result b = StepOf(dims, ModelOptions{}, params, tokens, B, T);
    SCOPED_TRACE(::testing::Message() << "e^{s_F} = " << scale);
    ExpectSame(a, b);
    Multiscreen<double> model(dims, ShardSpec::Full(dims));
    EXPECT_NEAR(model.Loss(params.data(), tokens.data(), B, T), a.loss, 1e-12 * a.loss);
  }
}

TEST(HeadTest, BothSoftmaxShiftsGiveTheLossOfTheLossOnlyPath) {
  // e^{s_F} = 5 takes the PLNorm bound as the shift; e^{s_F} = 60 is past the bound's safe
  // range and takes each row's max. Loss() uses the row max. tiny_psi4 (d_E = 16) runs
  // the bound shift through the panel kernels, tiny_psi2 (d_E = 4) through whole rows.
  for (const char* model_name : {"tiny_psi2", "tiny_psi4"}) {
    SCOPED_TRACE(model_name);
    CheckBothShifts(TinyDims(model_name));
  }
}

}  // namespace
}  // namespace multiscreen
