// Weighted mixtures: exact proportions over every block, Megatron's interleave, each
// source's own epochs, the same windows at any dp degree and after a resume.
#include "data/mixture.h"

#include <cmath>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "data/loader.h"
#include "data/token_file.h"
#include "data_test_util.h"
#include "gtest/gtest.h"

namespace multiscreen {
namespace {

using testing::TempDir;

TEST(MixtureScheduleTest, ProportionsAreExactOverEveryBlock) {
  struct Case {
    std::vector<double> weights;
    int64_t block;
    std::vector<int64_t> quotas;
  };
  for (const Case& c : std::vector<Case>{{{30, 70}, 10, {3, 7}},
                                         {{0.3, 0.7}, 10, {3, 7}},
                                         {{1, 1, 1}, 3, {1, 1, 1}},
                                         {{2, 1, 1}, 4, {2, 1, 1}},
                                         {{5}, 1, {1}},
                                         {{0.5, 0, 0.25, 0.25}, 4, {2, 0, 1, 1}},
                                         {{1, 999}, 1000, {1, 999}}}) {
    auto m = MixtureSchedule::Create(c.weights, {});
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->block(), c.block);
    for (int k = 0; k < m->num_sources(); ++k) EXPECT_EQ(m->quota(k), c.quotas[k]);
    // Every block, and every prefix of the run, counted by brute force.
    std::vector<int64_t> seen(c.weights.size(), 0), in_block(c.weights.size(), 0);
    std::vector<std::set<int64_t>> indices(c.weights.size());
    for (int64_t i = 0; i < 50 * m->block(); ++i) {
      const auto pick = m->Source(i);
      ASSERT_TRUE(indices[pick.source].insert(pick.index).second) << "index reused";
      ASSERT_EQ(pick.index, seen[pick.source]) << "a source's samples are numbered in order";
      ++seen[pick.source];
      ++in_block[pick.source];
      for (int k = 0; k < m->num_sources(); ++k) ASSERT_EQ(m->CountBefore(k, i + 1), seen[k]);
      if ((i + 1) % m->block() == 0) {
        for (int k = 0; k < m->num_sources(); ++k) ASSERT_EQ(in_block[k], c.quotas[k]) << "block ending at " << i;
        in_block.assign(in_block.size(), 0);
      }
      // Megatron's greedy interleave: every prefix within one sample of its share.
      for (int k = 0; k < m->num_sources(); ++k) {
        const double share = double(m->quota(k)) / double(m->block()) * double(i + 1);
        ASSERT_LT(std::abs(double(seen[k]) - share), 1.0 + 1e-9) << "prefix " << i + 1 << " source " << k;
      }
    }
  }
}

TEST(MixtureScheduleTest, ThirtySeventyInterleavesAsMegatronDoes) {
  auto m = *MixtureSchedule::Create({30, 70}, {"a", "b"});
  std::string order;
  for (int i = 0; i < 20; ++i) order += m.Source(i).source == 0 ? 'a' : 'b';
  // Megatron's build_blending_indices on (0.3, 0.7), whole-run float arithmetic, gives the same.
  EXPECT_EQ(order, "babbabbbabbabbabbbab");
}

TEST(MixtureScheduleTest, InexactWeightsRoundByLargestRemainder) {
  auto m = *MixtureSchedule::Create({1, std::sqrt(2.0), 3}, {});
  EXPECT_EQ(m.block(), MixtureSchedule::kMaxBlock);
  const double sum = 1 + std::sqrt(2.0) + 3;
  int64_t total = 0;
  for (int k = 0; k < 3; ++k) {
    EXPECT_LT(std::abs(double(m.quota(k)) - double(MixtureSchedule::kMaxBlock) * (k == 0 ? 1 : k == 1 ? std::sqrt(2.0) : 3) / sum), 1.0);
    total += m.quota(k);
  }
  EXPECT_EQ(total, MixtureSchedule::kMaxBlock);
}

TEST(MixtureScheduleTest, BadWeightsAreOneLineErrorsNamingTheSource) {
  auto error = [](std::vector<double> w) {
    auto m = MixtureSchedule::Create(w, {"web", "code"});
    return m.ok() ? std::string("ok") : std::string(m.status().message());
  };
  EXPECT_EQ(error({1, -0.5}), "source 1 (code): weight -0.5 is negative");
  EXPECT_EQ(error({NAN, 1}), "source 0 (web): weight nan is not finite");
  EXPECT_EQ(error({1, INFINITY}), "source 1 (code): weight inf is not finite");
  EXPECT_EQ(error({0, 0}), "the 2 source weights sum to 0 (expected a positive, finite sum)");
  EXPECT_EQ(error({}), "a mixture needs at least one source");
  EXPECT_EQ(error({0, 1}), "ok");
}

// A stream whose token at position p is base + p.
std::shared_ptr<TokenStream> Stream(const TempDir& dir, const std::string& name, int64_t n, int32_t base) {
  std::vector<int32_t> tokens(n);
  for (int64_t p = 0; p < n; ++p) tokens[p] = base + static_cast<int32_t>(p);
  EXPECT_TRUE(WriteTokenFile(dir.path(name), tokens).ok());
  return std::shared_ptr<TokenStream>(*TokenStream::Open({dir.path(name)}));
}

constexpr int32_t kBaseB = 1'000'000;

std::vector<LoaderSource> ThirtySeventy(const TempDir& dir) {
  return {{"small", 0.3, Stream(dir, "a.bin", 700, 0)}, {"large", 0.7, Stream(dir, "b.bin", 3000, kBaseB)}};
}

LoaderOptions Options(int64_t global_batch, int dp_rank = 0, int dp_size = 1, int64_t start = 0) {
  LoaderOptions o;
  o.seq_len = 16;
  o.global_batch = global_batch;
  o.seed = 23;
  o.dp_rank = dp_rank;
  o.dp_size = dp_size;
  o.start_sample = start;
  return o;
}

TEST(MixtureLoaderTest, EachSourceDrawsItsOwnEpochsInTheScheduledProportions) {
  TempDir dir;
  auto sources = ThirtySeventy(dir);
  auto loader = *TrainLoader::Create(sources, Options(8));
  const WindowSampler& a = loader->source_sampler(0);
  const WindowSampler& b = loader->source_sampler(1);
  ASSERT_EQ(a.windows_per_epoch(), 700 / 16 - 1);  // 42
  std::map<int, int64_t> count;
  std::vector<int64_t> a_starts;
  for (int step = 0; step < 40; ++step) {  // 320 samples: 96 of a (2+ epochs), 224 of b
    const Batch batch = *loader->Next();
    for (int64_t r = 0; r < batch.rows; ++r) {
      const int64_t i = batch.first_sample + r;
      const int32_t first = batch.tokens[r * 17];
      const int source = first >= kBaseB ? 1 : 0;
      const auto pick = loader->schedule().Source(i);
      ASSERT_EQ(source, pick.source) << "sample " << i;
      // The row is that source's window number `index`, from its own sampler.
      const int64_t start = (source == 0 ? a : b).Start(pick.index);
      for (int64_t t = 0; t < 17; ++t) ASSERT_EQ(batch.tokens[r * 17 + t], (source ? kBaseB : 0) + start + t);
      ++count[source];
      if (source == 0) a_starts.push_back(start);
    }
    if ((step + 1) * 8 % 10 == 0) {  // whole blocks: exactly 30/70
      EXPECT_EQ(count[0] * 7, count[1] * 3) << "after " << (step + 1) * 8 << " samples";
    }
  }
  EXPECT_EQ(count[0], 96);
  // Source a's first epoch is a permutation of its 42 windows; its second is another order.
  std::set<int64_t> first_epoch(a_starts.begin(), a_starts.begin() + 42);
  EXPECT_EQ(first_epoch.size(), 42u);
  EXPECT_NE(std::vector<int64_t>(a_starts.begin(), a_starts.begin() + 42),
            std::vector<int64_t>(a_starts.begin() + 42, a_starts.begin() + 84));
  // Tokens per source, from the schedule alone.
  EXPECT_EQ(loader->schedule().CountBefore(0, 320) * 16, 96 * 16);
}

TEST(MixtureLoaderTest, TheSameWindowsAtDp124AndAfterAResume) {
  TempDir dir;
  auto sources = ThirtySeventy(dir);
  auto single = *TrainLoader::Create(sources, Options(8));
  std::vector<std::vector<std::unique_ptr<TrainLoader>>> layouts;
  for (int dp : {2, 4}) {
    layouts.emplace_back();
    for (int r = 0; r < dp; ++r) layouts.back().push_back(*TrainLoader::Create(sources, Options(8, r, dp)));
  }
  std::vector<std::vector<int32_t>> history;
  for (int step = 0; step < 30; ++step) {
    const Batch whole = *single->Next();
    history.push_back(whole.tokens);
    for (auto& ranks : layouts) {
      std::vector<int32_t> joined;
      for (auto& rank : ranks) {
        const Batch part = *rank->Next();
        joined.insert(joined.end(), part.tokens.begin(), part.tokens.end());
      }
      ASSERT_EQ(joined, whole.tokens) << "dp " << ranks.size() << " step " << step;
    }
  }
  // Resumed at 13 batches (104 samples: mid-block, mid-epoch of both sources), on dp = 2.
  std::vector<std::unique_ptr<TrainLoader>> resumed;
  for (int r = 0; r < 2; ++r) resumed.push_back(*TrainLoader::Create(sources, Options(8, r, 2, 13 * 8)));
  for (int step = 13; step < 30; ++step) {
    std::vector<int32_t> joined;
    for (auto& rank : resumed) {
      const Batch part = *rank->Next();
      joined.insert(joined.end(), part.tokens.begin(), part.tokens.end());
    }
    ASSERT_EQ(joined, history[step]) << "step " << step;
  }
}

TEST(MixtureLoaderTest, OneSourceIsTheSingleStreamLoader) {
  TempDir dir;
  auto stream = Stream(dir, "a.bin", 5000, 0);
  auto plain = *TrainLoader::Create(stream, Options(8));
  auto mixed = *TrainLoader::Create(std::vector<LoaderSource>{{"only", 2.5, stream}}, Options(8));
  for (int step = 0; step < 50; ++step) ASSERT_EQ(plain->Next()->tokens, mixed->Next()->tokens);
}

TEST(MixtureLoaderTest, ASourceTooShortForAWindowIsNamed) {
  TempDir dir;
  std::vector<LoaderSource> sources = {{"web", 1, Stream(dir, "a.bin", 700, 0)}, {"tiny", 1, Stream(dir, "t.bin", 16, 0)}};
  EXPECT_EQ(TrainLoader::Create(sources, Options(8)).status().message(),
            "data source tiny: " + dir.path("t.bin") + ": holds 16 tokens, fewer than the 17 a window needs (seq_len + 1)");
  sources[1] = {"neg", -1, Stream(dir, "b.bin", 700, 0)};
  EXPECT_EQ(TrainLoader::Create(sources, Options(8)).status().message(), "source 1 (neg): weight -1 is negative");
  // A window's tokens are traced back to their file.
  auto loader = *TrainLoader::Create(ThirtySeventy(dir), Options(8));
  const auto pick = loader->schedule().Source(5);
  EXPECT_EQ(loader->Locate(5, 3),
            absl::StrCat(dir.path(pick.source == 0 ? "a.bin" : "b.bin"), ": token ",
                         loader->source_sampler(pick.source).Start(pick.index) + 3));
}

}  // namespace
}  // namespace multiscreen
