// The parallel machinery on one process (no MPI): grid splits and the step
// entry point, which on the (1, 1, 1) grid must be the plain model.
#include <gtest/gtest.h>

#include <cmath>

#include "model/multiscreen.h"
#include "parallel/shard_split.h"
#include "parallel/step.h"
#include "tests/model/test_model.h"
#include "tests/parallel/compare_shards.h"

namespace multiscreen {
namespace {

using testing::CompareShard;
using testing::PerturbedParams;
using testing::RandomTokens;
using testing::TinyDims;

TEST(ShardSplitTest, RangesCoverEverythingWithTheRemainderOnTheFirstParts) {
  EXPECT_EQ(SplitRange(10, 3, 0), (std::pair<int64_t, int64_t>{0, 4}));
  EXPECT_EQ(SplitRange(10, 3, 1), (std::pair<int64_t, int64_t>{4, 7}));
  EXPECT_EQ(SplitRange(10, 3, 2), (std::pair<int64_t, int64_t>{7, 10}));
  EXPECT_EQ(SplitRange(50257, 2, 1), (std::pair<int64_t, int64_t>{25129, 50257}));
}

TEST(ShardSplitTest, Psi8OnTwoTilesGroupsAndFourStagesGetsTheirSlices) {
  auto dims = LoadModel("psi8");
  ASSERT_TRUE(dims.ok());
  const GridShape shape{2, 4, 1};
  auto middle = ShardForCoord(*dims, shape, GridCoord{1, 1, 0});
  ASSERT_TRUE(middle.ok()) << middle.status();
  EXPECT_EQ(middle->layer_begin, 2);
  EXPECT_EQ(middle->layer_end, 4);
  EXPECT_EQ(middle->tile_begin, 4);
  EXPECT_EQ(middle->tile_end, 8);
  EXPECT_EQ(middle->vocab_begin, 25129);
  EXPECT_FALSE(middle->embed);
  EXPECT_FALSE(middle->head);
  auto first = ShardForCoord(*dims, shape, GridCoord{0, 0, 0});
  auto last = ShardForCoord(*dims, shape, GridCoord{0, 3, 0});
  EXPECT_TRUE(first->embed && !first->head);
  EXPECT_TRUE(last->head && !last->embed);
  EXPECT_EQ(last->layer_end, 8);
  // Only the first and last stage hold W_E: the middle one has none of it.
  EXPECT_EQ(ParamLayout(*dims, *middle).Find("embed/W_E"), nullptr);
}

TEST(ShardSplitTest, MoreTensorGroupsThanTilesIsRefusedNamingTheFlag) {
  const ModelDims dims = TinyDims("tiny_psi4");
  auto shard = ShardForCoord(dims, GridShape{8, 1, 1}, GridCoord{});
  ASSERT_FALSE(shard.ok());
  EXPECT_NE(shard.status().message().find("--tp=8 exceeds N_H = 4"), std::string::npos) << shard.status();
}

TEST(GridRankTest, TensorRankVariesFastestThenStageThenReplica) {
  const GridShape shape{2, 3, 2};
  EXPECT_EQ(GridRank(shape, GridCoord{1, 0, 0}), 1);
  EXPECT_EQ(GridRank(shape, GridCoord{0, 1, 0}), 2);
  EXPECT_EQ(GridRank(shape, GridCoord{0, 0, 1}), 6);
  for (int r = 0; r < shape.world(); ++r) EXPECT_EQ(GridRank(shape, GridCoordOf(shape, r)), r);
}

TEST(SingleProcessCommunicatorTest, SendToItselfIsReceivedInOrder) {
  SingleProcessCommunicator c;
  const float a[2] = {1, 2}, b[1] = {3};
  c.Send(a, 2, 0);
  c.Send(b, 1, 0);
  float got[2] = {0, 0};
  c.Recv(got, 2, 0);
  EXPECT_EQ(got[0], 1);
  EXPECT_EQ(got[1], 2);
  c.Recv(got, 1, 0);
  EXPECT_EQ(got[0], 3);
}

TEST(ComputeGradientsTest, OneProcessGridIsThePlainModelOverTheMicroBatches) {
  const ModelDims dims = TinyDims("tiny_psi4");
  auto grid = ProcessGrid::Single();
  auto model = ParallelModel::Create(*grid, dims);
  ASSERT_TRUE(model.ok()) << model.status();
  const ParamLayout& layout = (*model)->layout();
  const std::vector<float> params = PerturbedParams<float>(layout, 11);
  const int64_t M = 3, B = 2, T = 12;
  const auto tokens = RandomTokens(dims.vocab, M * B * (T + 1), 12);
  std::vector<float> grads(layout.size());
  auto loss = ComputeGradients(*grid, **model, params.data(), tokens.data(), StepShape{M, B, T}, grads.data());
  ASSERT_TRUE(loss.ok()) << loss.status();

  Multiscreen<float> reference(dims, ShardSpec::Full(dims));
  std::vector<float> ref_grads(layout.size(), 0.0f);
  double ref_loss = 0;
  for (int64_t m = 0; m < M; ++m) {
    ref_loss += reference.ForwardBackward(params.data(), tokens.data() + m * B * (T + 1), B, T, ref_grads.data(),
                                          nullptr, 1.0 / M) / M;
  }
  EXPECT_NEAR(*loss, ref_loss, 1e-6 * ref_loss);
  const auto c = CompareShard(layout, grads.data(), reference.layout(), ref_grads.data(), 1e-6);
  EXPECT_LE(c.worst, 1.0) << Describe(c);
  double norm = 0;
  for (float g : ref_grads) norm += double(g) * g;
  EXPECT_NEAR(GlobalGradNorm(*grid, **model, grads.data()), std::sqrt(norm), 1e-6 * std::sqrt(norm));
}

TEST(ComputeGradientsTest, ZeroMicroBatchesIsRefusedNamingTheFlag) {
  const ModelDims dims = TinyDims("tiny_psi4");
  auto grid = ProcessGrid::Single();
  auto model = ParallelModel::Create(*grid, dims);
  ASSERT_TRUE(model.ok());
  std::vector<float> params((*model)->layout().size()), grads(params.size());
  const auto tokens = RandomTokens(dims.vocab, 10, 1);
  auto loss = ComputeGradients(*grid, **model, params.data(), tokens.data(), StepShape{0, 1, 9}, grads.data());
  ASSERT_FALSE(loss.ok());
  EXPECT_NE(loss.status().message().find("--grad_accum=0"), std::string::npos) << loss.status();
}

}  // namespace
}  // namespace multiscreen
