#include "data/utf8.h"

#include <cstring>
#include <vector>

namespace multiscreen {
namespace {

// At s[i] (i < n, s[i] >= 0x80): the length (2–4) of the well-formed sequence that
// starts there (Unicode Table 3-7), or minus the length (1–3) of the maximal subpart
// of an ill-formed one: the lead byte and the continuation bytes valid after it so far.
int SequenceAt(const uint8_t* s, size_t n, size_t i) {
  const uint8_t c = s[i];
  int len;
  uint8_t lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong below
    if (c == 0xED) hi = 0x9F;  // surrogates above
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;  // overlong below
    if (c == 0xF4) hi = 0x8F;  // past U+10FFFF above
  } else {
    return -1;  // a continuation byte, C0, C1 or F5–FF
  }
  for (int k = 1; k < len; ++k) {
    if (i + k >= n) return -k;
    const uint8_t b = s[i + k];
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return -k;
  }
  return len;
}

// Index of the first byte >= 0x80 in s[i, n), or n; eight bytes at a time.
size_t SkipAscii(const uint8_t* s, size_t n, size_t i) {
  while (i + 8 <= n) {
    uint64_t w;
    std::memcpy(&w, s + i, 8);
    if (w & 0x8080808080808080ULL) break;
    i += 8;
  }
  while (i < n && s[i] < 0x80) ++i;
  return i;
}

// The value of the four hex digits at json[i, i + 4), or -1.
int Hex4(std::string_view json, size_t i) {
  if (i + 4 > json.size()) return -1;
  int v = 0;
  for (size_t k = i; k < i + 4; ++k) {
    const char c = json[k];
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else {
      return -1;
    }
    v = v * 16 + d;
  }
  return v;
}

// Calls on_lone(offset) at each lone surrogate escape of `json`, in order, until it
// returns false. Every backslash starts a two-character escape, so "\\\\udbc0" (an
// escaped backslash, then text) is skipped whole; outside strings a backslash is a
// JSON error that the parser reports.
template <typename F>
void ForEachLoneSurrogateEscape(std::string_view json, F&& on_lone) {
  for (size_t i = json.find('\\'); i != std::string_view::npos; i = json.find('\\', i)) {
    if (i + 1 < json.size() && json[i + 1] == 'u') {
      const int unit = Hex4(json, i + 2);
      if (unit >= 0xD800 && unit <= 0xDFFF) {
        const bool pair = unit <= 0xDBFF && i + 12 <= json.size() && json[i + 6] == '\\' && json[i + 7] == 'u' &&
                          Hex4(json, i + 8) >= 0xDC00 && Hex4(json, i + 8) <= 0xDFFF;
        if (pair) {
          i += 12;
          continue;
        }
        if (!on_lone(i)) return;
        i += 6;
        continue;
      }
    }
    i += 2;
  }
}

}  // namespace

int64_t FindInvalidUtf8(std::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  for (size_t i = SkipAscii(s, n, 0); i < n; i = SkipAscii(s, n, i)) {
    const int len = SequenceAt(s, n, i);
    if (len < 0) return static_cast<int64_t>(i);
    i += len;
  }
  return -1;
}

int64_t IncompleteUtf8Tail(std::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  // The last byte that is not a continuation byte, within the 4 last bytes.
  size_t k = 1;
  while (k <= 4 && k <= n && (s[n - k] & 0xC0) == 0x80) ++k;
  if (k > 3 || k > n || s[n - k] < 0xC2 || s[n - k] > 0xF4) return 0;  // no lead byte in reach
  return SequenceAt(s, n, n - k) == -static_cast<int>(k) ? static_cast<int64_t>(k) : 0;
}

std::string Utf8Holdback::Push(std::string_view bytes) {
  held_.append(bytes);
  const size_t keep = static_cast<size_t>(IncompleteUtf8Tail(held_));
  std::string ready = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return ready;
}

std::string Utf8Holdback::Finish() {
  std::string rest;
  rest.swap(held_);
  return rest;
}

int64_t ReplaceInvalidUtf8(std::string* text) {
  const int64_t first = FindInvalidUtf8(*text);
  if (first < 0) return 0;
  const auto* s = reinterpret_cast<const uint8_t*>(text->data());
  const size_t n = text->size();
  std::string out;
  out.reserve(n + n / 8);
  int64_t replaced = 0;
  size_t copied = 0;  // text[0, copied) is in `out`
  for (size_t i = static_cast<size_t>(first); i < n; i = SkipAscii(s, n, i)) {
    const int len = SequenceAt(s, n, i);
    if (len > 0) {
      i += len;
      continue;
    }
    out.append(*text, copied, i - copied);
    out.append("\xEF\xBF\xBD");
    ++replaced;
    i += -len;
    copied = i;
  }
  out.append(*text, copied, n - copied);
  text->swap(out);
  return replaced;
}

int64_t FindLoneSurrogateEscape(std::string_view json) {
  int64_t found = -1;
  ForEachLoneSurrogateEscape(json, [&](size_t offset) {
    found = static_cast<int64_t>(offset);
    return false;
  });
  return found;
}

int64_t ReplaceLoneSurrogateEscapes(std::string* json) {
  // "\uFFFD" is as long as the escape it replaces, so the rewrite is in place.
  std::vector<size_t> at;
  ForEachLoneSurrogateEscape(*json, [&](size_t offset) {
    at.push_back(offset);
    return true;
  });
  for (const size_t offset : at) json->replace(offset, 6, "\\uFFFD");
  return static_cast<int64_t>(at.size());
}

}  // namespace multiscreen
