// data/utf8.h: U+FFFD for invalid UTF-8 exactly where Python's errors="replace" puts
// them, and for JSON escapes of lone surrogates where tiktoken's repair puts them.
#include "data/utf8.h"

#include <string>
#include <string_view>
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

TEST(Utf8Test, IncompleteTailIsAWellFormedPrefixCutShort) {
  const std::pair<std::string, int64_t> cases[] = {
      {"", 0},          {"abc", 0},
      {"a\xc3", 1},     {"a\xc3\xa9", 0},                          // é cut after its lead; whole
      {"\xe3\x81", 2},  {"\xe3", 1},  {"\xe3\x81\xae", 0},         // の
      {"\xf0\x9f\x99", 3}, {"\xf0\x9f", 2}, {"\xf0\x9f\x99\x82", 0},  // 🙂
      {"\xe0\x80", 0},  {"\xed\xa0", 0},  {"\xf4\x90", 0},          // second bytes no sequence takes
      {"\x99\x82", 0},  {"\xc0", 0},  {"\xf5", 0},  {"\xff", 0},     // bytes that never lead
      {"\xc3\xa9\xe2\x98", 2},                                    // after a whole character
      {"\xe2\x98 x", 0},                                           // cut short by ASCII: never completes
  };
  for (const auto& [text, want] : cases) EXPECT_EQ(IncompleteUtf8Tail(text), want) << ::testing::PrintToString(text);
}

// Pieces cut anywhere (as GPT-2's byte-level tokens may cut a character) come out as
// whole characters, and the bytes out are the bytes in, ill-formed ones included.
TEST(Utf8Test, HoldbackEmitsWholeCharactersAndEveryByte) {
  const std::string text = "絵文字🙂 caf\xc3\xa9 日本語の\xf0\x9f\x98\x80!";
  for (size_t a = 0; a <= text.size(); ++a) {
    for (size_t b = a; b <= text.size(); ++b) {
      Utf8Holdback h;
      std::string out;
      for (const std::string_view piece : {std::string_view(text).substr(0, a),
                                           std::string_view(text).substr(a, b - a), std::string_view(text).substr(b)}) {
        const std::string ready = h.Push(piece);
        EXPECT_EQ(FindInvalidUtf8(ready), -1) << a << " " << b;  // never part of a character
        out += ready;
      }
      out += h.Finish();
      EXPECT_EQ(out, text) << a << " " << b;
    }
  }
  // Ill-formed bytes pass through as soon as they cannot complete; Finish gives the rest.
  Utf8Holdback h;
  EXPECT_EQ(h.Push("\x99\x82"), "\x99\x82");      // continuation bytes alone (a token's)
  EXPECT_EQ(h.Push("x\xe2\x98"), "x");             // held: U+2600's first two bytes
  EXPECT_EQ(h.Push(" realized"), "\xe2\x98 realized");
  EXPECT_EQ(h.Push("\xf0\x9f"), "");
  EXPECT_EQ(h.Finish(), "\xf0\x9f");
  EXPECT_EQ(h.Finish(), "");
}

}  // namespace
}  // namespace multiscreen
