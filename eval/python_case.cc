// Python's str.capitalize() over UTF-8 (eval/python_case.h).
#include "eval/python_case.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <vector>

namespace multiscreen::eval {
namespace {

struct CaseMapping {
  uint32_t from;
  uint32_t to[3];  // 1 to 3 code points, then zeros (no character maps to U+0000)
};
struct CodeRange {
  uint32_t lo, hi;  // inclusive
};

#include "eval/python_case_table.inc"

// The mapping of `c` in `table` (sorted by `from`), or null where c maps to itself.
template <size_t N>
const CaseMapping* Find(const CaseMapping (&table)[N], uint32_t c) {
  const CaseMapping* it = std::lower_bound(std::begin(table), std::end(table), c,
                                           [](const CaseMapping& m, uint32_t v) { return m.from < v; });
  return it != std::end(table) && it->from == c ? it : nullptr;
}

template <size_t N>
bool In(const CodeRange (&ranges)[N], uint32_t c) {
  const CodeRange* it = std::lower_bound(std::begin(ranges), std::end(ranges), c,
                                         [](const CodeRange& r, uint32_t v) { return r.hi < v; });
  return it != std::end(ranges) && it->lo <= c;
}

// UTF-8 → code points; false where `text` is not valid UTF-8 (overlong forms, surrogates,
// past U+10FFFF, cut sequences).
bool Decode(std::string_view text, std::vector<uint32_t>* out) {
  for (size_t i = 0; i < text.size();) {
    const unsigned char b = text[i];
    const size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > text.size()) return false;
    uint32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (size_t k = 1; k < n; ++k) {
      const unsigned char t = text[i + k];
      if ((t & 0xC0) != 0x80) return false;
      c = (c << 6) | (t & 0x3F);
    }
    static constexpr uint32_t kLeast[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < kLeast[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return false;
    out->push_back(c);
    i += n;
  }
  return true;
}

void Encode(uint32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

void Append(const CaseMapping* m, uint32_t c, std::string* out) {
  if (m == nullptr) return Encode(c, out);
  for (uint32_t t : m->to) {
    if (t != 0) Encode(t, out);
  }
}

// CPython's handle_capital_sigma: U+03A3 at i is final when a cased character precedes
// it and none follows it, case-ignorable characters skipped on both sides.
bool FinalSigma(const std::vector<uint32_t>& s, size_t i) {
  size_t j = i;
  while (j > 0 && In(kCaseIgnorable, s[j - 1])) --j;
  if (j == 0 || !In(kCased, s[j - 1])) return false;
  for (j = i + 1; j < s.size() && In(kCaseIgnorable, s[j]); ++j) {
  }
  return j == s.size() || !In(kCased, s[j]);
}

}  // namespace

std::string PythonCapitalize(std::string_view text) {
  std::vector<uint32_t> s;
  if (!Decode(text, &s)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == 0) {
      Append(Find(kTitle, s[0]), s[0], &out);
    } else if (s[i] == 0x3A3) {
      Encode(FinalSigma(s, i) ? 0x3C2 : 0x3C3, &out);
    } else {
      Append(Find(kLower, s[i]), s[i], &out);
    }
  }
  return out;
}

const char* PythonCaseSource() { return kPythonCaseSource; }

}  // namespace multiscreen::eval
