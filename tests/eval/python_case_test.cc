// Python's str.capitalize() (eval/python_case.h) against hand-checked values and against
// the CPython on this machine (/usr/bin/python3): tricky strings one by one, then every
// code point through the title-case, lower-case and final-sigma paths.
#include "eval/python_case.h"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "gtest/gtest.h"

namespace multiscreen::eval {
namespace {

constexpr char kPython[] = "/usr/bin/python3";

std::string Utf8(uint32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

// Runs `script` under /usr/bin/python3 with `input` as the file argv[1]; its stdout.
std::string RunPython(const std::string& script, const std::string& input) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string in = (dir / ("python_case_in_" + std::to_string(::getpid()))).string();
  const std::string code = (dir / ("python_case_py_" + std::to_string(::getpid()))).string();
  std::ofstream(in, std::ios::binary) << input;
  std::ofstream(code) << script;
  std::string out;
  if (FILE* p = ::popen((std::string(kPython) + " " + code + " " + in).c_str(), "r")) {
    char buf[4096];
    while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    ::pclose(p);
  }
  std::filesystem::remove(in);
  std::filesystem::remove(code);
  return out;
}

TEST(PythonCaseTest, CapitalizeIsUnicodeAwareTitleThenLower) {
  EXPECT_EQ(PythonCapitalize("they sit in the CAF\xC3\x89"), "They sit in the caf\xC3\xA9");  // É → é
  EXPECT_EQ(PythonCapitalize("then THE pot"), "Then the pot");
  EXPECT_EQ(PythonCapitalize(""), "");
  EXPECT_EQ(PythonCapitalize("\xC3\xA9t\xC3\x89"), "\xC3\x89t\xC3\xA9");     // "étÉ" → "Été"
  EXPECT_EQ(PythonCapitalize("\xC7\x86" "EMAL"), "\xC7\x85" "emal");         // ǆ → ǅ: title case, not Ǆ
  EXPECT_EQ(PythonCapitalize("\xC3\x9F" "A"), "Ssa");                        // ß → "Ss": one to two
  EXPECT_EQ(PythonCapitalize("x\xC4\xB0"), "Xi\xCC\x87");                    // İ → i + U+0307
  EXPECT_EQ(PythonCapitalize("\xCE\x9F\xCE\x94\xCE\x9F\xCE\xA3"),            // ΟΔΟΣ → Οδος: final ς
            "\xCE\x9F\xCE\xB4\xCE\xBF\xCF\x82");
  EXPECT_EQ(PythonCapitalize("\xCE\xA3\xCE\x91"), "\xCE\xA3\xCE\xB1");       // ΣΑ: the first Σ title-cased
  EXPECT_EQ(PythonCapitalize("1 \xCE\xA3"), "1 \xCF\x83");                   // no cased letter before: σ
  EXPECT_EQ(PythonCapitalize("\xFF" "ABC"), "\xFF" "ABC");                   // not UTF-8: unchanged
}

// Strings where a per-byte or simple-mapping capitalize goes wrong, each compared with
// this machine's CPython.
TEST(PythonCaseTest, TrickyStringsMatchCPython) {
  if (!std::filesystem::exists(kPython)) GTEST_SKIP() << kPython << " is missing";
  const std::vector<std::string> tricky = {
      "they sit in the CAF\xC3\x89",                   // É
      "\xC3\x9F" "trasse STRASSE",                     // ß first
      "\xEF\xAC\x81" "ne FINE",                        // ﬁ ligature → "Fi"
      "\xC5\x89" "x",                                  // ŉ → ʼN
      "\xC7\x84\xC7\x85\xC7\x86",                      // Ǆǅǆ
      "\xE1\xBE\x80\xE1\xBE\x88",                      // ᾀᾈ (Greek with ypogegrammeni)
      "\xCE\x9F\xCE\x94\xCE\x9F\xCE\xA3 \xCE\x9A\xCE\x91\xCE\x99",  // ΟΔΟΣ ΚΑΙ
      "\xCE\x91\xCE\xA3.",                             // ΑΣ. : "." is case-ignorable
      "\xCE\x91\xCE\xA3'\xCE\x91",                     // ΑΣ'Α: a cased letter after the quote
      "\xCE\x91\xCE\xA3\xCC\x81",                      // ΑΣ + combining acute
      "\xCE\xA3",                                      // Σ alone
      "a\xCE\xA3" "b",                                 // Latin around Σ
      "I\xC4\xB0\xC4\xB1",                             // IİI dotless/dotted
      "\xE1\xBA\x9E",                                  // ẞ capital sharp s
      "\xF0\x90\x90\x80\xF0\x90\x90\xA8",              // Deseret 𐐀𐐨
      "\xE2\x85\xA0\xE2\x85\xB0",                      // Roman numerals Ⅰⅰ (Nl, cased)
      "\xE2\x92\xB6\xE2\x93\x90",                      // circled Ⓐⓐ (So, cased)
      "1st PLACE",                                     // no letter first
      " leading SPACE",
      "\xD5\xA5\xD6\x82",                              // Armenian եւ → Եւ (title, not ԵՒ)
      "\xE1\x83\x90\xE1\xB2\x90",                      // Georgian Mkhedruli/Mtavruli
  };
  std::string input;
  for (const std::string& s : tricky) input += s + "\n";
  const std::string script =
      "import sys\n"
      "for line in open(sys.argv[1], encoding='utf-8', newline='\\n'):\n"
      "    sys.stdout.buffer.write(line[:-1].capitalize().encode('utf-8') + b'\\n')\n";
  const std::string out = RunPython(script, input);
  std::vector<std::string> want;
  for (size_t start = 0, end; (end = out.find('\n', start)) != std::string::npos; start = end + 1) {
    want.push_back(out.substr(start, end - start));
  }
  ASSERT_EQ(want.size(), tricky.size()) << out;
  for (size_t i = 0; i < tricky.size(); ++i) EXPECT_EQ(PythonCapitalize(tricky[i]), want[i]) << "string " << i;
}

// Every code point c (but U+0000 and the surrogates) in two strings: c c "AΣ" c (c's
// title and lower mappings, and Σ before c: final when c is case-ignorable or uncased) and
// "A" c "Σ" (Σ after c: final when c is case-ignorable or cased). Python gets what this
// code made and reports each string where its own capitalize() differs.
TEST(PythonCaseTest, EveryCodePointMatchesCPython) {
  if (!std::filesystem::exists(kPython)) GTEST_SKIP() << kPython << " is missing";
  const std::string sigma = "\xCE\xA3";
  std::string input;
  int64_t strings = 0;
  for (uint32_t c = 1; c < 0x110000; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    const std::string ch = Utf8(c);
    input += PythonCapitalize(ch + ch + "A" + sigma + ch) + '\0' + PythonCapitalize("A" + ch + sigma) + '\0';
    strings += 2;
  }
  const std::string script =
      "import sys\n"
      "got = open(sys.argv[1], 'rb').read().split(b'\\0')[:-1]\n"
      "cps = [c for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF]\n"
      "bad = []\n"
      "for k, c in enumerate(cps):\n"
      "    ch = chr(c)\n"
      "    for j, s in enumerate((ch + ch + 'A\\u03a3' + ch, 'A' + ch + '\\u03a3')):\n"
      "        if s.capitalize().encode('utf-8') != got[2 * k + j]:\n"
      "            bad.append('U+%04X(%d)' % (c, j))\n"
      "print(len(got), len(bad), ' '.join(bad[:20]))\n";
  const std::string out = RunPython(script, input);
  EXPECT_EQ(out, std::to_string(strings) + " 0 \n") << "(strings, mismatches, the first ones) from Python";
}

}  // namespace
}  // namespace multiscreen::eval
