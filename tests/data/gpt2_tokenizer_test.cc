// GPT-2 tokenizer against golden ids from an independent implementation
// (tools/make_tokenizer_goldens.js: js-tiktoken r50k_base, cross-checked with
// gpt-3-encoder), plus invalid UTF-8, file loading and the two merge paths.
#include "data/gpt2_tokenizer.h"

#include <sys/stat.h>

#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "data_test_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace multiscreen {

class Gpt2TokenizerTestPeer {
 public:
  static std::vector<int32_t> Bytes(const Gpt2Tokenizer& t, std::string_view s) {
    std::vector<int32_t> w;
    for (unsigned char c : s) w.push_back(t.byte_id_[c]);
    return w;
  }
  static void MergeShort(const Gpt2Tokenizer& t, std::vector<int32_t>* w) { t.MergeShort(w); }
  static void MergeLong(const Gpt2Tokenizer& t, std::vector<int32_t>* w) { t.MergeLong(w); }
};

namespace {

using testing::LoadGpt2OrFail;
using testing::TestDataDir;

nlohmann::json Goldens() {
  return nlohmann::json::parse(testing::ReadFile(TestDataDir() + "/gpt2_goldens.json"));
}

TEST(Gpt2TokenizerTest, EncodesEveryGoldenCaseTokenForToken) {
  auto tok = LoadGpt2OrFail();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_EQ(tok->eos_id(), 50256);
  const nlohmann::json goldens = Goldens();
  ASSERT_GE(goldens["cases"].size(), 40u);
  for (const auto& c : goldens["cases"]) {
    const std::string text = c["text"];
    const std::vector<int32_t> want = c["ids"];
    auto got = tok->Encode(text);
    ASSERT_TRUE(got.ok()) << c["name"] << ": " << got.status();
    EXPECT_EQ(*got, want) << "case " << c["name"];
  }
}

TEST(Gpt2TokenizerTest, DecodingInvertsEncodingOnEveryGoldenCase) {
  auto tok = LoadGpt2OrFail();
  ASSERT_NE(tok, nullptr);
  for (const auto& c : Goldens()["cases"]) {
    auto text = tok->Decode(c["ids"].get<std::vector<int32_t>>());
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(*text, c["text"].get<std::string>()) << "case " << c["name"];
  }
}

// The whole nlp-corpus (100 files, 100k strings, ~9 MB), each string then EOS, hashed.
TEST(Gpt2TokenizerTest, MatchesGoldenHashesOverTheWholeNlpCorpus) {
  auto tok = LoadGpt2OrFail();
  ASSERT_NE(tok, nullptr);
  const nlohmann::json goldens = Goldens();
  ASSERT_EQ(goldens["corpus"].size(), 100u);
  for (const auto& f : goldens["corpus"]) {
    const std::string path = absl::StrCat(testing::DataCacheDir(), "/nlp-corpus/", f["file"].get<std::string>());
    const std::string bytes = testing::ReadFile(path);
    ASSERT_FALSE(bytes.empty()) << path << " missing -- run scripts/setup";
    const auto docs = nlohmann::json::parse(bytes).get<std::vector<std::string>>();
    uint32_t h = 2166136261u;
    int64_t tokens = 0;
    std::vector<int32_t> ids;
    for (const std::string& doc : docs) {
      ids.clear();
      ASSERT_TRUE(tok->Encode(doc, &ids).ok()) << path;
      ids.push_back(tok->eos_id());
      for (int32_t id : ids) h = (h ^ static_cast<uint32_t>(id)) * 16777619u;
      tokens += static_cast<int64_t>(ids.size());
    }
    EXPECT_EQ(static_cast<int64_t>(docs.size()), f["documents"].get<int64_t>()) << path;
    EXPECT_EQ(tokens, f["tokens"].get<int64_t>()) << path;
    EXPECT_EQ(h, f["fnv1a"].get<uint32_t>()) << path;
  }
}

TEST(Gpt2TokenizerTest, SplitsLikeTheGpt2Pattern) {
  auto tok = testing::TinyTokenizer();
  ASSERT_NE(tok, nullptr);
  using V = std::vector<std::string_view>;
  EXPECT_EQ(*tok->Split("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(*tok->Split("a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(*tok->Split("I'm 42!! "), (V{"I", "'m", " 42", "!!", " "}));
  EXPECT_EQ(*tok->Split("x\n\n y"), (V{"x", "\n\n", " y"}));
  // Unicode White_Space: U+0085 is whitespace, U+FEFF is not (unlike JavaScript's \s).
  EXPECT_EQ(*tok->Split("x\u0085 "), (V{"x", "\u0085 "}));
  EXPECT_EQ(*tok->Split("x\ufeff "), (V{"x", "\ufeff", " "}));
  // Combining marks are neither letters nor numbers.
  EXPECT_EQ(*tok->Split("e\u0301t"), (V{"e", "\u0301", "t"}));
}

TEST(Gpt2TokenizerTest, RejectsInvalidUtf8WithTheByteOffset) {
  auto tok = testing::TinyTokenizer();
  ASSERT_NE(tok, nullptr);
  const std::pair<std::string, int> bad[] = {
      {"ab\xff" "cd", 2},             // not a lead byte
      {"abc\xc3", 3},                 // truncated at the end
      {"a\xc3(", 1},                  // bad continuation
      {"xy\xc0\x80", 2},              // overlong NUL
      {"\xe0\x80\xaf", 0},            // overlong '/'
      {"0123456789\xed\xa0\x80", 10}, // surrogate U+D800
      {"\xf4\x90\x80\x80", 0},        // past U+10FFFF
      {"\x80", 0},                    // lone continuation
  };
  for (const auto& [text, offset] : bad) {
    std::vector<int32_t> ids = {7};
    const absl::Status s = tok->Encode(text, &ids);
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.message(), absl::StrCat("invalid UTF-8 at byte ", offset));
    EXPECT_EQ(ids, std::vector<int32_t>{7}) << "ids must be left as they were";
    EXPECT_EQ(FindInvalidUtf8(text), offset);
  }
  EXPECT_EQ(FindInvalidUtf8("plain ascii and \xc3\xa9 \xe4\xbd\xa0 \xf0\x9f\x91\x8d \xf4\x8f\xbf\xbf"), -1);
}

TEST(Gpt2TokenizerTest, TinyVocabularyMergesLowestRankFirst) {
  auto tok = testing::TinyTokenizer();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 260);
  EXPECT_EQ(tok->eos_id(), 259);
  // "the" -> th (rank 0) then the (rank 1); " the" -> Ġ t h e: "t h" first, then
  // "th e" (rank 1) beats "Ġ th" (rank 2).
  EXPECT_EQ(*tok->Encode("the"), (std::vector<int32_t>{257}));
  EXPECT_EQ(*tok->Encode(" the"), (std::vector<int32_t>{' ', 257}));
  EXPECT_EQ(*tok->Encode(" tho"), (std::vector<int32_t>{258, 'o'}));
  EXPECT_EQ(*tok->Encode("<|endoftext|>").value().begin(), '<') << "special tokens are plain text";
  EXPECT_EQ(*tok->Decode({257, ' ', 259}), "the <|endoftext|>");
}

TEST(Gpt2TokenizerTest, DecodeRejectsIdsOutsideTheVocabulary) {
  auto tok = testing::TinyTokenizer();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Decode({1, 260}).status().message(), "token 1 has id 260, not in the vocabulary [0, 260)");
  EXPECT_FALSE(tok->Decode({-1}).ok());
}

// Pieces past 96 bytes merge with a heap; it must agree with encoder.py's scan.
TEST(Gpt2TokenizerTest, HeapMergeAgreesWithTheReferenceScan) {
  auto tok = LoadGpt2OrFail();
  ASSERT_NE(tok, nullptr);
  std::mt19937 rng(5);
  const std::string alphabet[] = {"a", "b", "e", "r", "t", "s", "in", "the", "ing", "=", "-", "é", "1", "0", "Ġ"};
  for (int trial = 0; trial < 300; ++trial) {
    std::string s;
    const int len = 1 + static_cast<int>(rng() % 400);
    const int kinds = 2 + static_cast<int>(rng() % 14);
    for (int i = 0; i < len; ++i) s += alphabet[rng() % kinds];
    std::vector<int32_t> a = Gpt2TokenizerTestPeer::Bytes(*tok, s), b = a;
    Gpt2TokenizerTestPeer::MergeShort(*tok, &a);
    Gpt2TokenizerTestPeer::MergeLong(*tok, &b);
    ASSERT_EQ(a, b) << "piece '" << s << "'";
  }
}

TEST(Gpt2TokenizerTest, LoadsEitherPairOfFileNames) {
  testing::TempDir dir;
  const std::string src = testing::DataCacheDir() + "/gpt2";
  testing::WriteFile(dir.path("vocab.json"), testing::ReadFile(src + "/encoder.json"));
  testing::WriteFile(dir.path("merges.txt"), testing::ReadFile(src + "/vocab.bpe"));
  auto tok = Gpt2Tokenizer::Load(dir.path());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(*(*tok)->Encode("Hello world"), (std::vector<int32_t>{15496, 995}));
}

TEST(Gpt2TokenizerTest, LoadErrorsNameTheFileAndLine) {
  testing::TempDir dir;
  EXPECT_EQ(Gpt2Tokenizer::Load(dir.path("nowhere")).status().message(),
            dir.path("nowhere") + ": tokenizer directory not found (run scripts/setup, which fetches data_cache/gpt2)");
  EXPECT_EQ(Gpt2Tokenizer::Load(dir.path()).status().message(), dir.path() + ": has no vocab.json or encoder.json");
  testing::WriteFile(dir.path("vocab.json"), "{\"a\": 0,");
  testing::WriteFile(dir.path("merges.txt"), "#version: 0.2\n");
  const std::string bad_json(Gpt2Tokenizer::Load(dir.path()).status().message());
  EXPECT_EQ(bad_json.rfind(dir.path("vocab.json") + ": not valid JSON", 0), 0u) << bad_json;
  testing::WriteFile(dir.path("vocab.json"), testing::ReadFile(testing::DataCacheDir() + "/gpt2/encoder.json"));
  testing::WriteFile(dir.path("merges.txt"), "#version: 0.2\nĠ t\nq zzzz\n");
  EXPECT_EQ(Gpt2Tokenizer::Load(dir.path()).status().message(),
            dir.path("merges.txt") + ":3: token 'zzzz' is not in " + dir.path("vocab.json"));
  testing::WriteFile(dir.path("merges.txt"), "#version: 0.2\nĠt\n");
  EXPECT_EQ(Gpt2Tokenizer::Load(dir.path()).status().message(),
            dir.path("merges.txt") + ":2: expected two tokens separated by one space, got 'Ġt'");
  testing::WriteFile(dir.path("vocab.json"), "{\"a\": 0}");
  EXPECT_EQ(Gpt2Tokenizer::Load(dir.path()).status().message(),
            dir.path("vocab.json") + ": has no token for byte 0 ('Ā')");
}


// A directory with GPT-2's two files, then `name` replaced by `bytes`.
std::string Gpt2DirWith(const testing::TempDir& dir, const std::string& name, const std::string& bytes) {
  const std::string src = testing::DataCacheDir() + "/gpt2";
  std::filesystem::remove_all(dir.path("encoder.json"));
  std::filesystem::remove_all(dir.path("vocab.bpe"));
  testing::WriteFile(dir.path("encoder.json"), testing::ReadFile(src + "/encoder.json"));
  testing::WriteFile(dir.path("vocab.bpe"), testing::ReadFile(src + "/vocab.bpe"));
  testing::WriteFile(dir.path(name), bytes);
  return dir.path();
}

TEST(Gpt2TokenizerTest, MergesFilesWithoutMergesAreRefusedNotByteLevel) {
  testing::TempDir dir;
  const std::string merges = dir.path("vocab.bpe");
  EXPECT_EQ(Gpt2Tokenizer::Load(Gpt2DirWith(dir, "vocab.bpe", "")).status().message(),
            merges + ": no merges (expected \"a b\" lines after the optional #version line; an empty or truncated "
                     "file?)");
  EXPECT_EQ(Gpt2Tokenizer::Load(Gpt2DirWith(dir, "vocab.bpe", "#version: 0.2\n\n")).status().message(),
            merges + ": no merges (expected \"a b\" lines after the optional #version line; an empty or truncated "
                     "file?)");
  auto one = Gpt2Tokenizer::Load(Gpt2DirWith(dir, "vocab.bpe", "#version: 0.2\nĠ t\n"));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*(*one)->Encode(" t"), (std::vector<int32_t>{256}));  // "Ġt" is id 256
}

TEST(Gpt2TokenizerTest, TokenizerFilesThatAreNotRegularFilesAreRefusedByName) {
  testing::TempDir dir;
  Gpt2DirWith(dir, "vocab.bpe", "");
  std::filesystem::remove(dir.path("vocab.bpe"));
  std::filesystem::create_directory(dir.path("vocab.bpe"));
  EXPECT_EQ(Gpt2Tokenizer::Load(dir.path()).status().message(),
            dir.path("vocab.bpe") + ": is a directory, not a regular file (expected a tokenizer merges file)");
  std::filesystem::remove(dir.path("vocab.bpe"));
  ASSERT_EQ(::mkfifo(dir.path("vocab.bpe").c_str(), 0600), 0);  // would block a plain open()
  EXPECT_EQ(Gpt2Tokenizer::Load(dir.path()).status().message(),
            dir.path("vocab.bpe") + ": is a FIFO (named pipe), not a regular file (expected a tokenizer merges file)");
  Gpt2DirWith(dir, "vocab.bpe", "#version: 0.2\nĠ t\n");
  std::filesystem::remove(dir.path("encoder.json"));
  std::filesystem::create_symlink("/dev/zero", dir.path("encoder.json"));  // never ends
  EXPECT_EQ(Gpt2Tokenizer::Load(dir.path()).status().message(),
            dir.path("encoder.json") + ": is a character device, not a regular file (expected a tokenizer vocabulary)");
  std::filesystem::remove(dir.path("encoder.json"));
  {
    std::ofstream big(dir.path("encoder.json"));  // sparse: 65 MiB of nothing, read by nobody
  }
  std::filesystem::resize_file(dir.path("encoder.json"), 65 << 20);
  EXPECT_EQ(Gpt2Tokenizer::Load(dir.path()).status().message(),
            dir.path("encoder.json") + ": 65 MiB, more than the 64 MiB a tokenizer vocabulary may be");
}

TEST(Gpt2TokenizerTest, VocabularyIdsMustBeTheEntriesNumberedOnce) {
  testing::TempDir dir;
  const std::string encoder = testing::ReadFile(testing::DataCacheDir() + "/gpt2/encoder.json");
  ASSERT_EQ(encoder.rfind("{\"!\": 0, \"\\\"\": 1, ", 0), 0u);
  // An id of 10^8 would size a 10^8-entry table (3 GB): bounded by the 50,257 entries.
  std::string huge = encoder;
  huge.replace(0, 7, "{\"!\": 100000000");
  EXPECT_EQ(Gpt2Tokenizer::Load(Gpt2DirWith(dir, "encoder.json", huge)).status().message(),
            dir.path("encoder.json") +
                ": token '!' has id 100000000, not an id in [0, 50257) (the file has 50257 entries)");
  std::string twice = encoder;
  twice.replace(0, 16, "{\"!\": 0, \"\\\"\": 0");
  EXPECT_EQ(Gpt2Tokenizer::Load(Gpt2DirWith(dir, "encoder.json", twice)).status().message(),
            dir.path("encoder.json") + ": id 0 is used twice");
}

}  // namespace
}  // namespace multiscreen
