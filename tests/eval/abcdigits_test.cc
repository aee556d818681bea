// eval/abcdigits.h against golden files that CPython wrote by running the author's
// algorithm (tools/abcdigits_reference.py --goldens=tests/eval/testdata): the dump of
// every case must be the file, byte for byte.
#include "eval/abcdigits.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "data/gpt2_tokenizer.h"
#include "eval/task_dump.h"

namespace multiscreen::eval {
namespace {

struct GoldenCase {
  const char* mode;
  int64_t length;
  const char* depth;  // as Python prints it in the file name
  int64_t instances;
  uint64_t seed;
};

// tools/abcdigits_reference.py GOLDEN_CASES.
const GoldenCase kCases[] = {
    {"lines", 50, "0.1", 4, 123},   {"lines", 64, "0.5", 4, 123},   {"lines", 200, "0.9", 3, 123},
    {"lines", 100, "0.0", 3, 7},    {"lines", 80, "1.0", 2, (uint64_t{1} << 40) + 5},
    {"tokens", 400, "0.1", 3, 123}, {"tokens", 1000, "0.7", 2, 123}, {"tokens", 600, "0.3", 2, 99},
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(AbcDigitsTest, BothModesEqualTheAuthorsGeneratorByteForByte) {
  auto tokenizer = Gpt2Tokenizer::Load(std::string(MS_SOURCE_DIR) + "/data_cache/gpt2");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto count = [&](const std::string& line) { return static_cast<int64_t>((*tokenizer)->Encode(line)->size()); };
  for (const GoldenCase& c : kCases) {
    AbcDigitsOptions o;
    o.depth = std::stod(c.depth);
    o.n_trials = c.instances;
    o.seed = c.seed;
    auto texts = std::string(c.mode) == "lines" ? AbcDigitsByLines(c.length, o) : AbcDigitsByTokens(c.length, o, count);
    ASSERT_TRUE(texts.ok()) << texts.status();
    std::string dump;
    for (const std::string& t : *texts) {
      const PromptAnswer pa = SplitAnswer(t, o.n_digits);
      dump += TaskLine(pa.prompt, pa.answer);
    }
    const std::string name = std::string("abcdigits_") + c.mode + "_" + std::to_string(c.length) + "_d" + c.depth + "_n" +
                             std::to_string(c.instances) + "_s" + std::to_string(c.seed) + ".jsonl";
    EXPECT_EQ(dump, ReadFile(std::string(MS_SOURCE_DIR) + "/tests/eval/testdata/" + name)) << name;
  }
}

TEST(AbcDigitsTest, AnInstanceHasTheTargetAtItsDepthAndAsTheLastLine) {
  AbcDigitsOptions o;
  o.depth = 0.5;
  o.n_trials = 3;
  auto texts = AbcDigitsByLines(64, o);
  ASSERT_TRUE(texts.ok());
  for (const std::string& t : *texts) {
    std::vector<std::string> lines;
    std::stringstream s(t);
    for (std::string line; std::getline(s, line);) lines.push_back(line);
    ASSERT_EQ(lines.size(), 64u);
    // The target is inserted at int(62 · 0.5) = 31 of the 62 shuffled lines, and repeated last.
    EXPECT_EQ(lines[31], lines.back());
    int target_count = 0;
    for (const std::string& line : lines) target_count += line == lines.back();
    EXPECT_EQ(target_count, 2);  // its weight is 0: never drawn as filler
    EXPECT_EQ(SplitAnswer(t, 6).answer, lines.back().substr(2));
  }
}

TEST(AbcDigitsTest, FewerThanFiftyLinesOrTooFewTokensAreRefusedNamingLength) {
  AbcDigitsOptions o;
  auto lines = AbcDigitsByLines(49, o);
  ASSERT_FALSE(lines.ok());
  EXPECT_NE(lines.status().message().find("--length=49"), std::string::npos);
  auto tokens = AbcDigitsByTokens(100, o, [](const std::string&) { return int64_t{6}; });
  ASSERT_FALSE(tokens.ok());
  EXPECT_NE(tokens.status().message().find("--length=100"), std::string::npos);
}

}  // namespace
}  // namespace multiscreen::eval
