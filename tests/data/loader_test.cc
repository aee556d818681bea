// Loader: windows as a pure function of (seed, index), epochs as permutations, dp
// invariance, resume from a sample count, the validation walk, and bad shards.
#include "data/loader.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "data/token_file.h"
#include "data_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace multiscreen {
namespace {

using testing::TempDir;
using ::testing::HasSubstr;

// Shards whose token at stream position p is p (so a window shows where it came from).
std::shared_ptr<TokenStream> PositionStream(const TempDir& dir, const std::vector<int64_t>& sizes,
                                            int64_t min_tokens = 1) {
  std::vector<std::string> paths;
  int64_t next = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<int32_t> tokens(sizes[i]);
    for (auto& t : tokens) t = static_cast<int32_t>(next++);
    paths.push_back(dir.path(absl::StrCat("train_", i, ".bin")));
    EXPECT_TRUE(WriteTokenFile(paths.back(), tokens).ok());
  }
  auto s = TokenStream::Open(paths, min_tokens);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::shared_ptr<TokenStream>(*std::move(s)) : nullptr;
}

LoaderOptions Options(int64_t seq_len, int64_t global_batch, uint64_t seed, int dp_rank = 0, int dp_size = 1) {
  LoaderOptions o;
  o.seq_len = seq_len;
  o.global_batch = global_batch;
  o.seed = seed;
  o.dp_rank = dp_rank;
  o.dp_size = dp_size;
  return o;
}

TEST(WindowSamplerTest, EveryEpochIsAPermutationOfNonOverlappingWindows) {
  for (const int64_t n : {11, 20, 21, 64, 1000, 4097, 100003}) {
    for (const int64_t t : {1, 3, 10, 64}) {
      if (n < t + 1) continue;
      auto s = WindowSampler::Create(n, t, 42);
      ASSERT_TRUE(s.ok()) << s.status();
      const int64_t w = s->windows_per_epoch();
      EXPECT_EQ(w, std::max<int64_t>(1, n / t - 1));
      for (int64_t epoch = 0; epoch < 3; ++epoch) {
        std::set<int64_t> starts;
        for (int64_t j = 0; j < w; ++j) {
          const int64_t start = s->Start(epoch * w + j);
          ASSERT_GE(start, 0);
          ASSERT_LE(start + t + 1, n) << "n " << n << " t " << t;
          EXPECT_EQ((start - s->EpochOffset(epoch)) % t, 0);
          starts.insert(start);
        }
        EXPECT_EQ(static_cast<int64_t>(starts.size()), w) << "n " << n << " t " << t << " epoch " << epoch;
      }
    }
  }
}

TEST(WindowSamplerTest, WindowsArePureFunctionsOfSeedAndIndex) {
  auto a = *WindowSampler::Create(100000, 16, 7);
  auto b = *WindowSampler::Create(100000, 16, 7);
  auto c = *WindowSampler::Create(100000, 16, 8);
  int differ = 0;
  for (int64_t i : {0, 1, 2, 1000, 6247, 6248, 123456, 99999999}) {
    EXPECT_EQ(a.Start(i), b.Start(i));
    differ += a.Start(i) != c.Start(i);
  }
  EXPECT_GE(differ, 6);
  // Random order within an epoch, fresh order and offset per epoch.
  const int64_t w = a.windows_per_epoch();
  int64_t in_order = 0, same_next_epoch = 0;
  for (int64_t j = 0; j + 1 < w; ++j) in_order += a.Permute(0, j) + 1 == a.Permute(0, j + 1);
  for (int64_t j = 0; j < w; ++j) same_next_epoch += a.Permute(0, j) == a.Permute(1, j);
  EXPECT_LT(in_order, w / 100);
  EXPECT_LT(same_next_epoch, w / 100);
  std::set<int64_t> offsets;
  for (int64_t e = 0; e < 20; ++e) offsets.insert(a.EpochOffset(e));
  EXPECT_GT(offsets.size(), 10u);
}

TEST(TrainLoaderTest, RowsAreTheSampledWindowsAcrossShardBoundaries) {
  TempDir dir;
  auto stream = PositionStream(dir, {300, 41, 500});
  ASSERT_EQ(stream->size(), 841);
  auto loader = TrainLoader::Create(stream, Options(20, 8, 3));
  ASSERT_TRUE(loader.ok()) << loader.status();
  bool spanned = false;
  for (int step = 0; step < 30; ++step) {
    const Batch b = *(*loader)->Next();
    ASSERT_EQ(b.rows, 8);
    ASSERT_EQ(b.tokens.size(), 8u * 21);
    for (int64_t r = 0; r < b.rows; ++r) {
      const int64_t start = (*loader)->sampler().Start(b.first_sample + r);
      for (int64_t k = 0; k < 21; ++k) ASSERT_EQ(b.tokens[r * 21 + k], start + k);
      spanned |= (start < 300 && start + 21 > 300) || (start < 341 && start + 21 > 341);
    }
  }
  EXPECT_TRUE(spanned) << "some window should cross a shard boundary";
  EXPECT_EQ((*loader)->samples_consumed(), 30 * 8);
}

TEST(TrainLoaderTest, SameSeedGivesTheSameBatches) {
  TempDir dir;
  auto stream = PositionStream(dir, {5000});
  auto a = *TrainLoader::Create(stream, Options(32, 4, 11));
  auto b = *TrainLoader::Create(stream, Options(32, 4, 11));
  auto c = *TrainLoader::Create(stream, Options(32, 4, 12));
  int differ = 0;
  for (int step = 0; step < 100; ++step) {  // several epochs (W = 155)
    const Batch x = *a->Next(), y = *b->Next(), z = *c->Next();
    ASSERT_EQ(x.tokens, y.tokens);
    differ += x.tokens != z.tokens;
  }
  EXPECT_GT(differ, 90);
}

TEST(TrainLoaderTest, DataParallelSlicesUnionToTheSingleRankBatch) {
  TempDir dir;
  auto stream = PositionStream(dir, {3000, 2000});
  auto single = *TrainLoader::Create(stream, Options(16, 8, 5));
  std::vector<std::vector<std::unique_ptr<TrainLoader>>> layouts;
  for (int dp : {2, 4, 8}) {
    layouts.emplace_back();
    for (int r = 0; r < dp; ++r) layouts.back().push_back(*TrainLoader::Create(stream, Options(16, 8, 5, r, dp)));
  }
  for (int step = 0; step < 50; ++step) {
    const Batch whole = *single->Next();
    for (auto& ranks : layouts) {
      std::vector<int32_t> joined;
      int64_t expect_first = whole.first_sample;
      for (auto& rank : ranks) {
        const Batch part = *rank->Next();
        EXPECT_EQ(part.first_sample, expect_first);
        expect_first += part.rows;
        joined.insert(joined.end(), part.tokens.begin(), part.tokens.end());
        EXPECT_EQ(rank->samples_consumed(), single->samples_consumed());
      }
      ASSERT_EQ(joined, whole.tokens) << "dp " << ranks.size() << " step " << step;
    }
  }
}

TEST(TrainLoaderTest, ResumingAtKSamplesEqualsConsumingK) {
  TempDir dir;
  auto stream = PositionStream(dir, {4000, 123, 999});
  for (int prefetch : {0, 1, 3}) {
    LoaderOptions o = Options(24, 6, 9);
    o.prefetch = prefetch;
    auto first = *TrainLoader::Create(stream, o);
    for (int i = 0; i < 37; ++i) (void)first->Next();  // crosses into the second epoch (W = 212)
    const int64_t k = first->samples_consumed();
    EXPECT_EQ(k, 37 * 6);
    o.start_sample = k;
    o.prefetch = 2;
    auto resumed = *TrainLoader::Create(stream, o);
    EXPECT_EQ(resumed->samples_consumed(), k);
    for (int i = 0; i < 20; ++i) {
      const Batch a = *first->Next(), b = *resumed->Next();
      ASSERT_EQ(a.first_sample, b.first_sample);
      ASSERT_EQ(a.tokens, b.tokens) << "prefetch " << prefetch << " batch " << i;
    }
  }
  // A resume point need not be a whole number of batches.
  auto odd = *TrainLoader::Create(stream, [] { LoaderOptions o = Options(24, 6, 9); o.start_sample = 5; return o; }());
  EXPECT_EQ(odd->Next()->first_sample, 5);
}

TEST(TrainLoaderTest, DestroyingWhilePrefetchingDoesNotHang) {
  TempDir dir;
  auto stream = PositionStream(dir, {2000});
  for (int i = 0; i < 20; ++i) {
    LoaderOptions o = Options(8, 4, i);
    o.prefetch = 4;
    auto loader = *TrainLoader::Create(stream, o);
    if (i % 2) (void)loader->Next();
  }
}

TEST(ValidationLoaderTest, WalksTheHeldOutStreamInOrder) {
  TempDir dir;
  auto stream = PositionStream(dir, {1001});
  ValidationOptions o;
  o.seq_len = 10;
  o.micro_batch = 4;
  auto val = ValidationLoader::Create(stream, o);
  ASSERT_TRUE(val.ok()) << val.status();
  EXPECT_EQ((*val)->windows(), 100);
  EXPECT_EQ((*val)->num_batches(), 25);
  Batch b;
  int64_t batches = 0;
  while ((*val)->Next(&b)) {
    ASSERT_EQ(b.rows, 4);
    for (int64_t r = 0; r < 4; ++r) {
      for (int64_t k = 0; k < 11; ++k) ASSERT_EQ(b.tokens[r * 11 + k], (batches * 4 + r) * 10 + k);
    }
    ++batches;
  }
  EXPECT_EQ(batches, 25);
  (*val)->Reset();
  ASSERT_TRUE((*val)->Next(&b));
  EXPECT_EQ(b.first_sample, 0);
}

// Window k of the stream starts at token 10k (PositionStream), so a batch's rows name
// their windows; the windows of one pass, over every replica and micro-batch.
std::vector<int64_t> PassWindows(std::shared_ptr<const TokenStream> stream, ValidationOptions o) {
  std::vector<int64_t> windows;
  for (o.dp_rank = 0; o.dp_rank < o.dp_size; ++o.dp_rank) {
    auto val = ValidationLoader::Create(stream, o);
    EXPECT_TRUE(val.ok()) << val.status();
    if (!val.ok()) return {};
    Batch b;
    int64_t previous_rows = -1;
    while ((*val)->Next(&b)) {
      EXPECT_LE(b.rows, o.micro_batch);
      EXPECT_GE(b.rows, 1);
      if (previous_rows >= 0) EXPECT_LE(b.rows, previous_rows);  // only the last one is short
      previous_rows = b.rows;
      for (int64_t r = 0; r < b.rows; ++r) windows.push_back(b.tokens[r * 11] / 10);
    }
  }
  std::sort(windows.begin(), windows.end());
  return windows;
}

TEST(ValidationLoaderTest, EvalWindowsAreTheSameWindowsUnderEveryLayout) {
  TempDir dir;
  auto stream = PositionStream(dir, {1001});
  std::vector<int64_t> first24(24);
  std::iota(first24.begin(), first24.end(), 0);
  ValidationOptions o;
  o.seq_len = 10;
  o.windows = 24;
  o.exact = true;
  for (auto [dp, micro_batch] : {std::pair{1, 4}, {2, 2}, {2, 5}, {4, 1}, {3, 7}, {8, 2}, {1, 24}, {1, 50}}) {
    o.dp_size = dp;
    o.micro_batch = micro_batch;
    EXPECT_EQ(PassWindows(stream, o), first24) << "dp " << dp << " micro_batch " << micro_batch;
  }
  // dp = 2, micro_batch 5: each replica 12 windows, micro-batches of 5, 5, 2 rows.
  o.dp_size = 2;
  o.dp_rank = 1;
  o.micro_batch = 5;
  auto rank1 = *ValidationLoader::Create(stream, o);
  EXPECT_EQ(rank1->num_batches(), 3);
  EXPECT_EQ(rank1->Get(2).rows, 2);
  EXPECT_EQ(rank1->Get(2).first_sample, 12 + 10);
}

TEST(ValidationLoaderTest, ACountThatCannotBeKeptIsAnErrorWithWindowsAndRoundedDownWithBatches) {
  TempDir dir;
  auto stream = PositionStream(dir, {1001});  // 100 windows of T = 10
  ValidationOptions o;
  o.seq_len = 10;
  o.micro_batch = 4;
  o.dp_size = 4;
  o.windows = 30;
  o.exact = true;
  auto odd = ValidationLoader::Create(stream, o);
  ASSERT_FALSE(odd.ok());
  EXPECT_THAT(std::string(odd.status().message()), HasSubstr("eval.windows = 30 is not a positive multiple of dp = 4"));
  o.windows = 104;
  auto many = ValidationLoader::Create(stream, o);
  ASSERT_FALSE(many.ok());
  EXPECT_THAT(std::string(many.status().message()), HasSubstr("100 validation windows"));
  EXPECT_THAT(std::string(many.status().message()), HasSubstr("fewer than eval.windows = 104"));
  // eval.batches: what dp and the stream allow, rounded down to a multiple of dp.
  o.exact = false;
  EXPECT_EQ((*ValidationLoader::Create(stream, o))->windows(), 100);
  o.windows = 30;
  EXPECT_EQ((*ValidationLoader::Create(stream, o))->windows(), 28);
  o.dp_size = 3;
  o.windows = 0;  // every window there is
  EXPECT_EQ((*ValidationLoader::Create(stream, o))->windows(), 99);
}

TEST(LoaderErrorsTest, BadShardsAreOneLineErrorsNamingTheFile) {
  TempDir dir;
  const std::string good = dir.path("train_000000.bin");
  ASSERT_TRUE(WriteTokenFile(good, std::vector<int32_t>(100, 7)).ok());
  const std::string bytes = testing::ReadFile(good);
  auto with_header_int = [&](const std::string& name, int index, int32_t value) {
    std::string b = bytes;
    std::memcpy(b.data() + index * 4, &value, 4);
    testing::WriteFile(dir.path(name), b);
    return dir.path(name);
  };
  auto error = [](const std::vector<std::string>& paths, int64_t min_tokens = 1) {
    auto s = TokenStream::Open(paths, min_tokens);
    return s.ok() ? std::string("ok") : std::string(s.status().message());
  };
  const std::string magic = with_header_int("magic.bin", 0, 1234);
  EXPECT_EQ(error({good, magic}), magic + ": bad magic 1234 (expected 20240520, llm.c .bin; no .idx beside it for a "
                                          "Megatron pair; a headerless nanoGPT file needs --format=raw_uint16)");
  const std::string version = with_header_int("version.bin", 1, 3);
  EXPECT_EQ(error({version}), version + ": unsupported version 3 (expected 1 or 2)");
  const std::string count = with_header_int("count.bin", 2, 101);
  EXPECT_EQ(error({count}), count + ": header says 101 tokens of 2 bytes but the file holds 200 bytes after the header");
  testing::WriteFile(dir.path("tiny.bin"), "short");
  EXPECT_EQ(error({dir.path("tiny.bin")}), dir.path("tiny.bin") + ": 5 bytes, shorter than the 1024-byte llm.c header");
  EXPECT_EQ(error({dir.path("none.bin")}), dir.path("none.bin") + ": cannot open token shard (No such file or directory)");
  EXPECT_EQ(error({good}, 101), good + ": holds 100 tokens, fewer than the 101 a window needs (seq_len + 1)");
  EXPECT_EQ(error({good}, 100), "ok");
  EXPECT_EQ(error({}), "no token shards given");

  auto stream = std::shared_ptr<TokenStream>(*TokenStream::Open({good}));
  EXPECT_EQ(TrainLoader::Create(stream, Options(100, 4, 0)).status().message(),
            good + ": holds 100 tokens, fewer than the 101 a window needs (seq_len + 1)");
  // However the stream was opened, the loaders name a shard too short for one window.
  const std::string short_shard = dir.path("train_000001.bin");
  ASSERT_TRUE(WriteTokenFile(short_shard, std::vector<int32_t>(30, 1)).ok());
  auto two = std::shared_ptr<TokenStream>(*TokenStream::Open({good, short_shard}));
  EXPECT_EQ(TrainLoader::Create(two, Options(40, 4, 0)).status().message(),
            short_shard + ": holds 30 tokens, fewer than the 41 a window needs (seq_len + 1)");
  ValidationOptions v40;
  v40.seq_len = 40;
  v40.micro_batch = 1;
  EXPECT_EQ(ValidationLoader::Create(two, v40).status().message(),
            short_shard + ": holds 30 tokens, fewer than the 41 a window needs (seq_len + 1)");
  EXPECT_EQ(TrainLoader::Create(stream, Options(10, 6, 0, 0, 4)).status().message(),
            "global batch 6 is not divisible by the data-parallel degree 4");
  ValidationOptions v;
  v.seq_len = 10;
  v.micro_batch = 1;
  v.dp_size = 16;
  EXPECT_EQ(ValidationLoader::Create(stream, v).status().message(),
            good + ": 100 tokens make 9 validation windows of seq_len + 1 = 11, fewer than one per data-parallel "
                   "replica (dp = 16)");
}

TEST(LoaderErrorsTest, ListShardsFindsOurAndLlmcNames) {
  TempDir dir;
  for (const char* name : {"train_000001.bin", "train_000000.bin", "val_000000.bin", "fineweb_train_000002.bin",
                           "fineweb_val_000000.bin", "notes.txt"}) {
    testing::WriteFile(dir.path(name), "");
  }
  auto train = ListShards(dir.path(), "train");
  ASSERT_TRUE(train.ok());
  EXPECT_EQ(*train, (std::vector<std::string>{dir.path("fineweb_train_000002.bin"), dir.path("train_000000.bin"),
                                              dir.path("train_000001.bin")}));
  EXPECT_EQ(ListShards(dir.path(), "val")->size(), 2u);
  EXPECT_EQ(*ListShards(dir.path("val_000000.bin"), "train"), std::vector<std::string>{dir.path("val_000000.bin")});
  EXPECT_EQ(ListShards(dir.path("nowhere"), "train").status().message(),
            dir.path("nowhere") + ": no such shard file or directory");
  EXPECT_EQ(ListShards(dir.path(), "test").status().message(),
            dir.path() + ": no test shards (test_*.bin) in the directory");
}

// A gap in a directory's shard numbers (train_000000.bin, then train_000005.bin) usually
// means shards lost in a copy; it trained on what was left without a word. Refused, naming
// the missing numbers; llm.c's numbering from 1 and each file named alone still pass.
TEST(LoaderErrorsTest, AGapInTheShardNumbersIsRefusedNamingTheMissingOnes) {
  TempDir dir;
  for (const char* name : {"train_000000.bin", "train_000005.bin", "train_000006.bin", "train_000008.bin",
                           "val_000000.bin", "fineweb_train_000001.bin", "fineweb_train_000002.bin"}) {
    testing::WriteFile(dir.path(name), "");
  }
  EXPECT_EQ(ListShards(dir.path(), "train").status().message(),
            dir.path() + ": train_000001.bin to train_000004.bin and train_000007.bin are missing from the numbering "
                         "(lost shards?); to use the shards there alone, name each file (data.train_shards in a run file)");
  EXPECT_EQ(ListShards(dir.path(), "val")->size(), 1u);
  EXPECT_EQ(*ListShards(dir.path("train_000005.bin"), "train"), std::vector<std::string>{dir.path("train_000005.bin")});
  TempDir llmc;
  for (const char* name : {"fineweb_val_000000.bin", "fineweb_train_000001.bin", "fineweb_train_000002.bin"}) {
    testing::WriteFile(llmc.path(name), "");
  }
  EXPECT_EQ(ListShards(llmc.path(), "train")->size(), 2u);
}


TEST(LoaderErrorsTest, AShardThatIsNotARegularFileIsRefusedWithoutBlocking) {
  TempDir dir;
  // A FIFO would block open() until a writer came; a directory listing finds it too.
  ASSERT_EQ(::mkfifo(dir.path("train_000000.bin").c_str(), 0600), 0);
  auto shards = ListShards(dir.path(), "train");
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_EQ(TokenStream::Open(*shards).status().message(),
            dir.path("train_000000.bin") + ": is a FIFO (named pipe), not a regular file (expected a token shard)");
  EXPECT_EQ(*ListShards(dir.path("train_000000.bin"), "train"), std::vector<std::string>{dir.path("train_000000.bin")});
  EXPECT_EQ(TokenStream::Open({"/dev/zero"}).status().message(),
            "/dev/zero: is a character device, not a regular file (expected a token shard)");
  EXPECT_EQ(TokenStream::Open({dir.path()}).status().message(),
            dir.path() + ": is a directory, not a regular file (expected a token shard)");
  EXPECT_EQ(ReadTokenFile(dir.path("train_000000.bin")).status().message(),
            dir.path("train_000000.bin") + ": is a FIFO (named pipe), not a regular file (expected a token file)");
}

TEST(LoaderErrorsTest, ABatchThatCannotBeMadeIsAnErrorOnTheCallersThread) {
  TempDir dir;
  auto stream = PositionStream(dir, {100});
  // 2^40 windows of 11 tokens (44 TB): the allocation fails in the prefetch thread,
  // which must not terminate the process but hand the failure to Next().
  for (const int prefetch : {2, 0}) {
    LoaderOptions o = Options(10, int64_t{1} << 40, 0);
    o.prefetch = prefetch;
    auto loader = TrainLoader::Create(stream, o);
    ASSERT_TRUE(loader.ok()) << loader.status();
    auto batch = (*loader)->Next();
    EXPECT_EQ(batch.status().message(), dir.path("train_0.bin") +
                                            ": cannot make a batch of 1099511627776 windows of 11 tokens "
                                            "(out of memory)")
        << "prefetch " << prefetch;
    EXPECT_EQ((*loader)->samples_consumed(), 0);
    EXPECT_FALSE((*loader)->Next().ok());  // stays failed, never waits forever
  }
}

TEST(TokenFileTest, IdsPastTheVocabularyOrInt32AreRefusedWithTheirIndex) {
  TempDir dir;
  const std::string path = dir.path("wide.bin");
  // Version 2 stores uint32: 2^31 and 2^32 - 1 would read as negative int32.
  for (const uint32_t big : {0x80000000u, 0xffffffffu}) {
    ASSERT_TRUE(WriteTokenFile(path, {1, 70000, 2, 3}).ok());
    std::string bytes = testing::ReadFile(path);
    std::memcpy(bytes.data() + 1024 + 2 * 4, &big, 4);
    testing::WriteFile(path, bytes);
    EXPECT_EQ(ReadTokenFile(path).status().message(), absl::StrCat(path, ": token 2 is ", big, ", not below 2^31"));
    EXPECT_EQ(ReadTokenFile(path, 4, 100000).status().message(),
              absl::StrCat(path, ": token 2 is ", big, ", not below the model's vocabulary V = 100000"));
  }
  ASSERT_TRUE(WriteTokenFile(path, {1, 70000, 2, 3}).ok());
  EXPECT_EQ(ReadTokenFile(path, 4, 50257).status().message(),
            path + ": token 1 is 70000, not below the model's vocabulary V = 50257");
  EXPECT_EQ(*ReadTokenFile(path, 1, 50257), std::vector<int32_t>{1});  // only what is read is checked
  EXPECT_EQ(*ReadTokenFile(path, -1, 70001), (std::vector<int32_t>{1, 70000, 2, 3}));
}

}  // namespace
}  // namespace multiscreen
