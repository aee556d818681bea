// Parameter counts against the paper's table (spec "Parameters and initialization").
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/config.h"
#include "model/init.h"
#include "model/param_layout.h"

namespace multiscreen {
namespace {

struct PaperRow {
  const char* model;
  int64_t total;
  int64_t non_embedding;
};

void PrintTo(const PaperRow& row, std::ostream* os) {
  *os << row.model << " (" << row.total << " parameters, " << row.non_embedding << " non-embedding)";
}

class PaperTableTest : public ::testing::TestWithParam<PaperRow> {};

TEST_P(PaperTableTest, LayoutReproducesThePapersCounts) {
  const PaperRow row = GetParam();
  auto dims = LoadModel(row.model);
  ASSERT_TRUE(dims.ok()) << dims.status();
  const ParamCounts c = CountParams(*dims);
  EXPECT_EQ(c.total, row.total);
  EXPECT_EQ(c.non_embedding, row.non_embedding);
  EXPECT_EQ(c.embedding + c.embed_head_scalars + c.tile_matrices + c.tile_scalars, c.total);
  EXPECT_EQ(ModelParamCount(*dims), double(row.total));  // the bound the file checks use
}

INSTANTIATE_TEST_SUITE_P(Paper, PaperTableTest,
                         ::testing::Values(PaperRow{"psi8", 4134146, 917698}, PaperRow{"psi16", 27546626, 14680834},
                                           PaperRow{"psi32", 286347266, 234884098},
                                           PaperRow{"psi48", 1304884226, 1189092098},
                                           PaperRow{"psi64", 3963961346, 3758108674}),
                         [](const ::testing::TestParamInfo<PaperRow>& info) { return std::string(info.param.model); });

// Issue 30's ablation models (configs/models/, docs/ablations.md): the positional variants
// have the standard model's parameters exactly; the gateless model gives W_G's d_E·d_V per
// tile to the value path (d_V' = 3 d_V / 2 = 96 widens W_V and W_O), so that
// 2 d_E d_V' = 3 d_E d_V and the totals agree exactly, with no W_G in the layout.
TEST(AblationModelsTest, VariantsMatchTheStandardModelsParameterCount) {
  for (const char* base : {"psi8", "psi32"}) {
    const auto standard = LoadModel(base);
    ASSERT_TRUE(standard.ok()) << standard.status();
    const ParamCounts want = CountParams(*standard);
    for (const char* suffix : {"_nope", "_rope", "_nogate"}) {
      const std::string name = std::string(base) + suffix;
      const auto dims = LoadModel(name);
      ASSERT_TRUE(dims.ok()) << dims.status();
      const ParamCounts c = CountParams(*dims);
      EXPECT_EQ(c.total, want.total) << name;
      EXPECT_EQ(c.non_embedding, want.non_embedding) << name;
      EXPECT_EQ(ModelParamCount(*dims), double(want.total)) << name;
      const ParamLayout layout(*dims, ShardSpec::Full(*dims));
      EXPECT_EQ(layout.Find("layers/000/W_G") != nullptr, dims->output_gate) << name;
    }
  }
  const auto gateless = LoadModel("psi8_nogate");
  ASSERT_TRUE(gateless.ok());
  EXPECT_FALSE(gateless->output_gate);
  EXPECT_EQ(gateless->d_v, 96);
  EXPECT_EQ(LoadModel("psi8_rope")->position, kernels::PositionKind::kRope);
  EXPECT_EQ(LoadModel("psi8_nope")->position, kernels::PositionKind::kNope);
  // The gateless layout: W_O follows W_V and MultiscreenEntry skips the missing W_G.
  const ParamLayout layout(*gateless, ShardSpec::Full(*gateless));
  EXPECT_EQ(layout.EntriesPerLayer(), 7);
  EXPECT_EQ(layout.MultiscreenEntry(1, 3), -1);
  EXPECT_EQ(layout.entries()[layout.MultiscreenEntry(1, 4)].name, "layers/001/W_O");
  EXPECT_EQ(layout.entries()[layout.MultiscreenEntry(1, 7)].name, "layers/001/s_O");
}

TEST(ParamLayoutTest, ShardsTileTheFullLayoutExactly) {
  auto dims = LoadModel("tiny_psi4");
  ASSERT_TRUE(dims.ok()) << dims.status();
  const ParamLayout full(*dims, ShardSpec::Full(*dims));
  // Two tiles of layers 1..3 and vocabulary rows 10..50: every entry is the slice asked for.
  ShardSpec shard = ShardSpec::Full(*dims);
  shard.layer_begin = 1;
  shard.layer_end = 3;
  shard.tile_begin = 2;
  shard.tile_end = 4;
  shard.vocab_begin = 10;
  shard.vocab_end = 50;
  shard.embed = false;
  const ParamLayout part(*dims, shard);
  ASSERT_NE(part.Find("layers/001/W_Q"), nullptr);
  EXPECT_EQ(part.Find("layers/000/W_Q"), nullptr);
  EXPECT_EQ(part.Find("embed/s_E"), nullptr);
  ASSERT_NE(part.Find("head/s_F"), nullptr);
  const ParamEntry* w_q = part.Find("layers/002/W_Q");
  EXPECT_EQ(w_q->global_shape, (std::vector<int64_t>{4, 16, 8}));
  EXPECT_EQ(w_q->offset, (std::vector<int64_t>{2, 0, 0}));
  EXPECT_EQ(w_q->shape, (std::vector<int64_t>{2, 16, 8}));
  const ParamEntry* w_e = part.Find("embed/W_E");
  EXPECT_EQ(w_e->shape, (std::vector<int64_t>{40, 16}));
  EXPECT_EQ(part.entries()[part.LayerEntry(2)].name, "layers/002/W_Q");
  EXPECT_EQ(part.entries()[part.LayerEntry(1) + 7].name, "layers/001/s_O");
}

// Issue 30: SSMax's s_SS is one scalar per head and layer (transformer_8m: N_L = 6, N_H = 4),
// counted in tile_scalars, in ModelParamCount's bound, and split over tp like the heads.
TEST(ParamLayoutTest, SsmaxAddsOneScalarPerHeadAndLayerSplitLikeTheHeads) {
  auto plain = LoadModel("transformer_8m");
  ASSERT_TRUE(plain.ok()) << plain.status();
  ModelDims ssmax = *plain;
  ssmax.attention = AttentionKind::kSsmax;
  const ParamCounts a = CountParams(*plain), b = CountParams(ssmax);
  EXPECT_EQ(a.total, 7613312);  // the paper's Table 4
  EXPECT_EQ(b.total - a.total, 24);
  EXPECT_EQ(b.tile_scalars, 24);
  EXPECT_EQ(ModelParamCount(ssmax), double(b.total));
  const ParamLayout rank1(ssmax, ShardSpec::ForRank(ssmax, 2, 1, 1, 0));
  const ParamEntry* s_ss = rank1.Find("layers/003/s_SS");
  ASSERT_NE(s_ss, nullptr);
  EXPECT_EQ(s_ss->offset, (std::vector<int64_t>{2}));
  EXPECT_EQ(s_ss->shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(rank1.EntriesPerLayer(), 10);
  EXPECT_EQ(rank1.entries()[rank1.LayerEntry(3) + 5].name, "layers/003/s_SS");
  EXPECT_EQ(rank1.entries()[rank1.LayerEntry(3) + 9].name, "layers/003/W_down");
}

// Issue 30: attention SCREENING adds s_w and s_r per head and layer, after W_O, split over
// tp like the heads, initialized as Multiscreen's tiles: s_w spread over the heads'
// log w_th · h/(N_H − 1) (global head h), s_r = 0.
TEST(ParamLayoutTest, ScreeningAddsAWindowAndAnAcceptanceWidthPerHead) {
  ModelDims screening = *LoadModel("transformer_8m");
  screening.attention = AttentionKind::kScreening;
  const ParamCounts c = CountParams(screening);
  EXPECT_EQ(c.total, 7613312 + 2 * 6 * 4);
  EXPECT_EQ(c.tile_scalars, 48);
  EXPECT_EQ(ModelParamCount(screening), double(c.total));
  const ParamLayout rank1(screening, ShardSpec::ForRank(screening, 2, 1, 1, 0));
  EXPECT_EQ(rank1.EntriesPerLayer(), 11);
  EXPECT_EQ(rank1.entries()[rank1.LayerEntry(3) + 5].name, "layers/003/s_w");
  EXPECT_EQ(rank1.entries()[rank1.LayerEntry(3) + 6].name, "layers/003/s_r");
  const ParamEntry* s_w = rank1.Find("layers/003/s_w");
  ASSERT_NE(s_w, nullptr);
  EXPECT_EQ(s_w->offset, (std::vector<int64_t>{2}));
  std::vector<double> p(rank1.size());
  InitParams(rank1, 1, p.data());
  EXPECT_NEAR(p[s_w->buffer_offset], std::log(256.0) * 2 / 3, 1e-15);  // global head 2 of 4
  EXPECT_NEAR(p[s_w->buffer_offset + 1], std::log(256.0), 1e-15);
  EXPECT_EQ(p[rank1.Find("layers/003/s_r")->buffer_offset], 0.0);
}

}  // namespace
}  // namespace multiscreen
