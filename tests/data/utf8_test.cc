// data/utf8.h: U+FFFD for invalid UTF-8 exactly where Python's errors="replace" puts
// them, and for JSON escapes of lone surrogates where tiktoken's repair puts them.
#include "data/utf8.h"

#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace multiscreen {
namespace {

#define FFFD "\xef\xbf\xbd"

TEST(Utf8Test, InvalidSequencesBecomeOneReplacementPerMaximalSubpartAsInPython) {
  // Expected: bytes.decode("utf-8", errors="replace").encode() in CPython 3.11.
  const std::pair<std::string, std::string> cases[] = {
      {"ok \xe6\xad" " end", "ok " FFFD " end"},            // the issue's report: one U+FFFD
      {"\xe0\x80\x80", FFFD FFFD FFFD},                     // overlong: E0 takes A0-BF only
      {"\xed\xa0\x80" "x", FFFD FFFD FFFD "x"},             // a surrogate: ED takes 80-9F only
      {"\xf0\x80", FFFD FFFD},                              // F0 takes 90-BF only
      {"\xf4\x90\x80\x80", FFFD FFFD FFFD FFFD},            // past U+10FFFF
      {"\xc0\xaf", FFFD FFFD},                              // C0, C1 never lead
      {"\xf0\x9f\x91", FFFD},                               // a truncated emoji at the end
      {"\xf0\x9f\x91" "a", FFFD "a"},                       // ... and before ASCII
      {"\xff\xfe", FFFD FFFD},
      {"a\x80\x80" "b", "a" FFFD FFFD "b"},                 // lone continuation bytes
      {"\xf5", FFFD},
      {"caf\xc3\xa9 \xc3", "caf\xc3\xa9 " FFFD},
      {"\xe1\x80\xe2\xf0\x91\x92\xf1\xbf" "A", FFFD FFFD FFFD FFFD "A"},  // Unicode Table 3-11's kind
  };
  for (const auto& [in, want] : cases) {
    std::string text = in;
    const int64_t n = ReplaceInvalidUtf8(&text);
    EXPECT_EQ(text, want) << "input " << ::testing::PrintToString(in);
    size_t count = 0;
    for (size_t p = 0; (p = want.find(FFFD, p)) != std::string::npos; p += 3) ++count;
    EXPECT_EQ(n, static_cast<int64_t>(count));
    EXPECT_EQ(FindInvalidUtf8(text), -1);
  }
  std::string valid = "plain ascii and caf\xc3\xa9 \xe4\xbd\xa0 \xf0\x9f\x91\x8d \xf4\x8f\xbf\xbf " FFFD;
  const std::string before = valid;
  EXPECT_EQ(ReplaceInvalidUtf8(&valid), 0);
  EXPECT_EQ(valid, before);
}

TEST(Utf8Test, LoneSurrogateEscapesBecomeReplacementsAndPairsStay) {
  // Expected: tiktoken's repair of json.loads's string,
  // s.encode("utf-16", "surrogatepass").decode("utf-16", "replace").
  const std::pair<std::string, std::string> cases[] = {
      {R"({"text":"a \udbc0 b"})", "a " FFFD " b"},           // the issue's report
      {R"(["\ud83d\ude00"])", "\xf0\x9f\x98\x80"},             // a pair is one character
      {R"(["\uD83D\uDE00"])", "\xf0\x9f\x98\x80"},             // in capitals too
      {R"(["\ud800\ud83d\ude00"])", FFFD "\xf0\x9f\x98\x80"},  // a high before a pair
      {R"(["\ude00\ud83d"])", FFFD FFFD},                      // reversed halves
      {R"(["x\ud83d"])", "x" FFFD},                            // a high at the end
      {R"(["\ud83d\\ude00"])", FFFD "\\ude00"},                // a high, then an escaped backslash
      {R"(["\\ud800"])", "\\ud800"},                           // an escaped backslash, then text
      {R"(["\\\ud800"])", "\\" FFFD},                          // both
      {R"(["\u00e9\n\t"])", "\xc3\xa9\n\t"},                   // other escapes are left alone
  };
  for (const auto& [in, want] : cases) {
    std::string json = in;
    const bool lone = want.find(FFFD) != std::string::npos;
    EXPECT_EQ(FindLoneSurrogateEscape(json) >= 0, lone) << in;
    ReplaceLoneSurrogateEscapes(&json);
    const nlohmann::json parsed = nlohmann::json::parse(json);
    EXPECT_EQ(parsed.is_array() ? parsed[0] : parsed["text"], want) << in;
    EXPECT_EQ(FindLoneSurrogateEscape(json), -1) << json;
  }
  std::string two = R"(["\udbc0 \udc00"])";
  EXPECT_EQ(FindLoneSurrogateEscape(two), 2);
  EXPECT_EQ(ReplaceLoneSurrogateEscapes(&two), 2);
  EXPECT_EQ(two, R"(["\uFFFD \uFFFD"])");
}

}  // namespace
}  // namespace multiscreen
