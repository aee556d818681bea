// Helpers shared by the data tests: where the fetched data and test data live,
// temporary directories, a tiny byte-level vocabulary that needs no download.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "data/gpt2_tokenizer.h"
#include "gtest/gtest.h"

namespace multiscreen::testing {

// data_cache/ as fetched by scripts/setup (override: $MULTISCREEN_DATA_CACHE).
inline std::string DataCacheDir() {
  if (const char* env = std::getenv("MULTISCREEN_DATA_CACHE")) return env;
  return std::string(MS_SOURCE_DIR) + "/data_cache";
}

inline std::string TestDataDir() { return std::string(MS_SOURCE_DIR) + "/tests/data/testdata"; }

// GPT-2's tokenizer from data_cache/gpt2; fails the test (never skips) when absent.
inline std::unique_ptr<Gpt2Tokenizer> LoadGpt2OrFail() {
  auto t = Gpt2Tokenizer::Load(DataCacheDir() + "/gpt2");
  if (!t.ok()) {
    ADD_FAILURE() << t.status().message() << " -- run scripts/setup (it runs scripts/fetch_data)";
    return nullptr;
  }
  return *std::move(t);
}

// A fresh empty directory under the test temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::path(::testing::TempDir()) /
            absl::StrCat("ms_data_", info->test_suite_name(), "_", info->name(), "_", ::getpid());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string path(const std::string& name = "") const { return name.empty() ? path_.string() : (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A tokenizer with GPT-2's 256 byte tokens (ids 0..255 in byte order), a few merges
// ("t h" -> 256, "th e" -> 257, "Ġ th" -> 258) and <|endoftext|> = `eos_id` (a larger
// id makes the vocabulary wide, e.g. 70000 -> version 2 shards; ids 259 ... eos_id - 1
// are then filler tokens "zz<id>", since a vocabulary's ids have no gaps).
inline std::unique_ptr<Gpt2Tokenizer> TinyTokenizer(int eos_id = 259) {
  // bytes_to_unicode, as in encoder.py.
  std::vector<uint32_t> cp(256);
  uint32_t n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool direct = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    cp[b] = direct ? b : 256 + n++;
  }
  auto utf8 = [](uint32_t c) {
    std::string s;
    if (c < 0x80) {
      s.push_back(static_cast<char>(c));
    } else {
      s.push_back(static_cast<char>(0xC0 | (c >> 6)));
      s.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
    return s;
  };
  auto quote = [](const std::string& s) {
    std::string q = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') q.push_back('\\');
      q.push_back(c);
    }
    return q + "\"";
  };
  std::string vocab = "{";
  for (int b = 0; b < 256; ++b) absl::StrAppend(&vocab, quote(utf8(cp[b])), ": ", b, ", ");
  const std::string space = utf8(cp[' ']);
  absl::StrAppend(&vocab, "\"th\": 256, \"the\": 257, ", quote(space + "th"), ": 258, ");
  for (int id = 259; id < eos_id; ++id) absl::StrAppend(&vocab, "\"zz", id, "\": ", id, ", ");
  absl::StrAppend(&vocab, "\"<|endoftext|>\": ", eos_id, "}");
  const std::string merges = absl::StrCat("#version: 0.2\nt h\nth e\n", space, " th\n");
  auto t = Gpt2Tokenizer::FromStrings(vocab, merges, "tiny");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

}  // namespace multiscreen::testing
