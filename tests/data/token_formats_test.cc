// Token file formats beside llm.c's: Megatron-LM indexed datasets (written by
// tools/megatron_indexed.py, our transcription of Megatron's writer) and nanoGPT's
// headerless uint16 files, read back token for token, as training sources.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/loader.h"
#include "data/megatron_index.h"
#include "data/token_file.h"
#include "data_test_util.h"
#include "gtest/gtest.h"

namespace multiscreen {
namespace {

using testing::TempDir;

// Runs tools/megatron_indexed.py to write `prefix`.bin/.idx of `docs_json` in `dtype`.
void WriteMegatron(const TempDir& dir, const std::string& prefix, const std::string& dtype,
                   const std::string& docs_json) {
  const std::string docs = dir.path("docs.json");
  testing::WriteFile(docs, docs_json);
  const std::string cmd = absl::StrCat("/usr/bin/python3 ", MS_SOURCE_DIR, "/tools/megatron_indexed.py --prefix=",
                                       prefix, " --dtype=", dtype, " --docs=", docs, " > /dev/null");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

std::vector<int32_t> ReadAll(const TokenStream& s) {
  std::vector<int32_t> out(static_cast<size_t>(s.size()));
  if (s.size() > 0) s.Read(0, s.size(), out.data());
  return out;
}

std::string OpenError(const std::vector<std::string>& paths, TokenFormat format = TokenFormat::kAuto) {
  auto s = TokenStream::Open(paths, 1, format);
  return s.ok() ? std::string("ok") : std::string(s.status().message());
}

// Overwrites `bytes` at `offset` of `path`.
void Patch(const std::string& path, int64_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(offset);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Documents: one sequence each, an empty one, one of three sequences (one of them empty),
// and ids past 32,767 (a sign error would show) in both dtypes.
constexpr char kDocs[] = "[[5, 6, 7], [], [[8, 9], [], [10]], [50256], [65000, 1, 2, 3], []]";
const std::vector<int32_t> kTokens = {5, 6, 7, 8, 9, 10, 50256, 65000, 1, 2, 3};
const std::vector<int64_t> kBoundaries = {0, 3, 3, 6, 7, 11, 11};

TEST(MegatronIndexTest, PairsOfBothDtypesReadBackTokenForTokenWithTheirDocuments) {
  TempDir dir;
  for (const char* dtype : {"uint16", "int32"}) {
    const std::string prefix = dir.path(absl::StrCat("corpus_", dtype, "_text_document"));
    WriteMegatron(dir, prefix, dtype, kDocs);
    auto index = MegatronIndex::Open(prefix + ".idx", prefix + ".bin");
    ASSERT_TRUE(index.ok()) << index.status();
    EXPECT_EQ((*index)->dtype_code(), std::string(dtype) == "uint16" ? 8 : 4);
    EXPECT_EQ((*index)->num_documents(), 6);
    EXPECT_EQ((*index)->num_sequences(), 8);  // 1 + 1 + 3 + 1 + 1 + 1: an empty document is one empty sequence
    EXPECT_EQ((*index)->num_tokens(), 11);
    EXPECT_EQ((*index)->DocumentBoundaries(), kBoundaries);
    EXPECT_EQ((*index)->document_tokens(2), (std::pair<int64_t, int64_t>{3, 6}));
    // Named by the .bin, the .idx or the prefix: the same stream, the documents in order.
    for (const std::string& name : {prefix + ".bin", prefix + ".idx", prefix}) {
      auto shards = ListShards(name, "train");
      ASSERT_TRUE(shards.ok()) << shards.status();
      auto stream = TokenStream::Open(*shards);
      ASSERT_TRUE(stream.ok()) << name << ": " << stream.status();
      EXPECT_EQ((*stream)->shard_format(0), TokenFormat::kMegatron);
      EXPECT_EQ(ReadAll(**stream), kTokens) << name;
      EXPECT_EQ(*(*stream)->DocumentBoundaries(), kBoundaries);
      EXPECT_EQ((*stream)->Locate(8), name + ": token 8");
    }
  }
  // Two pairs in one stream: the second's documents shifted by the first's tokens.
  auto two = TokenStream::Open({dir.path("corpus_uint16_text_document"), dir.path("corpus_int32_text_document")});
  ASSERT_TRUE(two.ok()) << two.status();
  auto b = *(*two)->DocumentBoundaries();
  EXPECT_EQ(b.size(), 13u);
  EXPECT_EQ(b[6], 11);
  EXPECT_EQ(b[9], 11 + 6);
  EXPECT_EQ(b.back(), 22);
}

TEST(MegatronIndexTest, TheSameTokensTrainIdenticallyAsAMegatronPairOrAnLlmcShard) {
  TempDir dir;
  std::vector<int32_t> tokens(5000);
  std::string docs = "[";
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>((i * 7919) % 50257);
    docs += absl::StrCat(i % 37 == 0 ? (i == 0 ? "[" : "], [") : ", ", tokens[i]);
  }
  docs += "]]";
  WriteMegatron(dir, dir.path("mega"), "uint16", docs);
  ASSERT_TRUE(WriteTokenFile(dir.path("train_000000.bin"), tokens).ok());
  auto mega = std::shared_ptr<TokenStream>(*TokenStream::Open({dir.path("mega")}));
  auto llmc = std::shared_ptr<TokenStream>(*TokenStream::Open({dir.path("train_000000.bin")}));
  ASSERT_EQ(ReadAll(*mega), tokens);
  LoaderOptions o;
  o.seq_len = 64;
  o.global_batch = 8;
  o.seed = 17;
  auto a = *TrainLoader::Create(mega, o);
  auto b = *TrainLoader::Create(llmc, o);
  for (int step = 0; step < 40; ++step) ASSERT_EQ(a->Next()->tokens, b->Next()->tokens) << "step " << step;
}

TEST(MegatronIndexTest, BadPairsAreOneLineErrorsNamingTheFile) {
  TempDir dir;
  const std::string p = dir.path("m");
  WriteMegatron(dir, dir.path("pristine"), "uint16", "[[1, 2, 3], [4, 5]]");
  auto fresh = [&] {
    for (const char* ext : {".bin", ".idx"}) {
      std::filesystem::copy_file(dir.path("pristine") + ext, p + ext, std::filesystem::copy_options::overwrite_existing);
    }
  };
  fresh();
  ASSERT_EQ(OpenError({p}), "ok");
  Patch(p + ".idx", 0, "MMIDIDY");
  EXPECT_EQ(OpenError({p}),
            p + ".idx: unknown magic \"MMIDIDY\\x00\\x00\" (expected \"MMIDIDX\\x00\\x00\", a Megatron-LM .idx)");
  fresh();
  Patch(p + ".idx", 9, std::string("\x02", 1));
  EXPECT_EQ(OpenError({p}), p + ".idx: unknown Megatron index version 2 (expected 1)");
  fresh();
  Patch(p + ".idx", 17, std::string("\x09", 1));
  EXPECT_EQ(OpenError({p}), p + ".idx: unknown dtype code 9 (Megatron's codes are 1 to 8)");
  fresh();
  Patch(p + ".idx", 17, std::string("\x07", 1));
  EXPECT_EQ(OpenError({p}),
            p + ".idx: token dtype float32 (code 7) is not supported: expected uint16 (8) or int32 (4)");
  fresh();
  // The .bin one token short of what the index lists.
  std::filesystem::resize_file(p + ".bin", 8);
  EXPECT_EQ(OpenError({p}), p + ".bin: 8 bytes, but its index " + p + ".idx lists 5 uint16 tokens (10 bytes)");
  fresh();
  std::filesystem::resize_file(p + ".idx", 60);
  EXPECT_EQ(OpenError({p}),
            p + ".idx: header says 2 sequences and 3 document indices (82 bytes) but the file has 60 bytes");
  fresh();
  std::filesystem::resize_file(p + ".idx", 20);
  EXPECT_EQ(OpenError({p}), p + ".idx: 20 bytes, shorter than the 34-byte Megatron index header");
  // Pointers that are not back to back (sequence 1 said to start at byte 4, not 6).
  fresh();
  int64_t four = 4;
  Patch(p + ".idx", 34 + 2 * 4 + 8, std::string(reinterpret_cast<const char*>(&four), 8));
  EXPECT_EQ(OpenError({p}), p + ".idx: sequence 1 starts at byte 4 of the .bin, not at 6 where the sequences "
                                "before it end (only back-to-back sequences are read)");
  // Megatron asked for, but no pair.
  EXPECT_EQ(OpenError({dir.path("none")}, TokenFormat::kMegatron),
            dir.path("none") + ": not a Megatron pair (" + dir.path("none") + ".bin and " + dir.path("none") +
                ".idx must both exist)");
}

TEST(RawUint16Test, NanoGptFilesAreReadWhenTheFormatIsSaidOrTheNameIsUnambiguous) {
  TempDir dir;
  std::vector<uint16_t> raw = {1, 2, 50256, 60000, 7};
  raw.resize(600, 3);  // longer than an llm.c header, so that only the magic tells them apart
  std::string bytes(reinterpret_cast<const char*>(raw.data()), raw.size() * 2);
  testing::WriteFile(dir.path("train.bin"), bytes);
  testing::WriteFile(dir.path("val.bin"), bytes);
  testing::WriteFile(dir.path("tokens.u16"), bytes);
  const std::vector<int32_t> expect(raw.begin(), raw.end());
  auto named = TokenStream::Open({dir.path("train.bin")}, 1, TokenFormat::kRawUint16);
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(ReadAll(**named), expect);
  EXPECT_EQ((*named)->shard_format(0), TokenFormat::kRawUint16);
  auto by_extension = TokenStream::Open({dir.path("tokens.u16")});
  ASSERT_TRUE(by_extension.ok()) << by_extension.status();
  EXPECT_EQ(ReadAll(**by_extension), expect);
  // nanoGPT's directory layout: train.bin and val.bin.
  EXPECT_EQ(*ListShards(dir.path(), "val", TokenFormat::kRawUint16), std::vector<std::string>{dir.path("val.bin")});
  EXPECT_EQ(ListShards(dir.path(), "test", TokenFormat::kRawUint16).status().message(),
            dir.path() + ": no test shards (test_*.bin or test.bin) in the directory");
  // A headerless .bin is not guessed at.
  EXPECT_EQ(OpenError({dir.path("train.bin")}),
            dir.path("train.bin") + ": bad magic 131073 (expected 20240520, llm.c .bin; no .idx beside it for a "
                                    "Megatron pair; a headerless nanoGPT file needs --format=raw_uint16)");
  testing::WriteFile(dir.path("odd.bin"), "abc");
  EXPECT_EQ(OpenError({dir.path("odd.bin")}, TokenFormat::kRawUint16),
            dir.path("odd.bin") + ": 3 bytes, an odd size for headerless uint16 tokens (raw_uint16)");
  EXPECT_EQ(ParseTokenFormat("RAW_UINT16").value(), TokenFormat::kRawUint16);
}

// Issue 31: --format=raw_uint16 said of an llm.c shard read its 1,024-byte header as 512
// tokens; of a Megatron pair's .bin, its documents without their boundaries. Both are
// refused naming the format the file is.
TEST(RawUint16Test, FilesOfAnotherFormatAreRefusedNamingIt) {
  TempDir dir;
  std::vector<int32_t> tokens(300);
  for (int i = 0; i < 300; ++i) tokens[i] = i % 97;
  ASSERT_TRUE(WriteTokenFile(dir.path("train_000000.bin"), tokens).ok());
  EXPECT_EQ(OpenError({dir.path("train_000000.bin")}, TokenFormat::kRawUint16),
            dir.path("train_000000.bin") +
                ": --format=raw_uint16, but the file starts with llm.c's header (magic 20240520): read raw, its "
                "header would be trained on; it is --format=llmc (or auto)");
  WriteMegatron(dir, dir.path("corpus"), "uint16", "[[1, 2, 3], [4, 5]]");
  EXPECT_EQ(OpenError({dir.path("corpus.bin")}, TokenFormat::kRawUint16),
            dir.path("corpus.bin") + ": --format=raw_uint16, but " + dir.path("corpus.idx") +
                " is beside it: a Megatron pair is --format=megatron (or auto)");
  EXPECT_EQ(ParseTokenFormat("npy").status().message(), "format=npy: expected auto, llmc, megatron or raw_uint16");
}

// forward --tokens reads the first tokens of any format (it read llm.c shards only), each
// checked against the vocabulary with its value as the file holds it.
TEST(ReadTokensTest, TheFirstTokensOfEveryFormatAreTheSameIdsCheckedAgainstTheVocabulary) {
  TempDir dir;
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_TRUE(WriteTokenFile(dir.path("t.bin"), ids).ok());
  std::vector<uint16_t> raw(ids.begin(), ids.end());
  testing::WriteFile(dir.path("t.u16"), std::string(reinterpret_cast<const char*>(raw.data()), raw.size() * 2));
  WriteMegatron(dir, dir.path("m"), "uint16", "[[1, 2, 3], [4, 5, 6, 7, 8]]");
  for (const std::string& path : {dir.path("t.bin"), dir.path("t.u16"), dir.path("m.idx")}) {
    auto got = ReadTokens(path, TokenFormat::kAuto, 6, 9);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, std::vector<int32_t>(ids.begin(), ids.begin() + 6)) << path;
    EXPECT_EQ(ReadTokens(path, TokenFormat::kAuto, 9).status().message(), path + ": holds 8 tokens, 9 needed");
    EXPECT_EQ(ReadTokens(path, TokenFormat::kAuto, 8, 8).status().message(),
              path + ": token 7 is 8, not below the model's vocabulary V = 8");
  }
  // A version-2 shard holding 2^31 + 5 (WriteTokenFile refuses it as a negative int32).
  std::string wide(1024, '\0');
  const int32_t header[3] = {kTokenFileMagic, 2, 3};
  std::memcpy(wide.data(), header, sizeof header);
  const uint32_t big[3] = {1, 2, 0x80000005u};
  wide.append(reinterpret_cast<const char*>(big), sizeof big);
  testing::WriteFile(dir.path("wide.bin"), wide);
  EXPECT_EQ(ReadTokens(dir.path("wide.bin"), TokenFormat::kAuto, 3, 50257).status().message(),
            dir.path("wide.bin") + ": token 2 is 2147483653, not below the model's vocabulary V = 50257");
}

// eval ppl --resume's identity of a text --data: the same bytes give the same
// fingerprint; another byte in a sampled block, or another size, another one.
TEST(SampledFileFingerprintTest, ChangesWithTheBytesAndTheSize) {
  TempDir dir;
  std::string text(100000, 'a');
  testing::WriteFile(dir.path("a.txt"), text);
  const std::string first = SampledFileFingerprint(dir.path("a.txt"), "text file").value();
  EXPECT_EQ(first.size(), 8u);
  testing::WriteFile(dir.path("b.txt"), text);
  EXPECT_EQ(SampledFileFingerprint(dir.path("b.txt"), "text file").value(), first);
  text[0] = 'b';  // the first block is always sampled
  testing::WriteFile(dir.path("a.txt"), text);
  EXPECT_NE(SampledFileFingerprint(dir.path("a.txt"), "text file").value(), first);
  text[0] = 'a';
  testing::WriteFile(dir.path("a.txt"), text + "a");
  EXPECT_NE(SampledFileFingerprint(dir.path("a.txt"), "text file").value(), first);
  EXPECT_EQ(SampledFileFingerprint(dir.path(), "text file").status().message(),
            dir.path() + ": is a directory, not a regular file (expected a text file)");
}

}  // namespace
}  // namespace multiscreen
