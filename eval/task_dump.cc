#include "eval/task_dump.h"

#include <cstdint>
#include <cstdio>

namespace multiscreen::eval {
namespace {

void AppendU(std::string& out, uint32_t unit) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\u%04x", unit);
  out += buf;
}

// The code point at s[i] (advancing i); 0xFFFD for a malformed sequence.
uint32_t NextCodePoint(std::string_view s, size_t& i) {
  const auto b = static_cast<unsigned char>(s[i++]);
  if (b < 0x80) return b;
  int extra = b >= 0xF0 && b < 0xF5 ? 3 : b >= 0xE0 ? 2 : b >= 0xC2 && b < 0xE0 ? 1 : -1;
  if (b >= 0xF5) extra = -1;
  if (extra < 0) return 0xFFFD;
  uint32_t cp = b & (0x3F >> extra);
  for (int k = 0; k < extra; ++k) {
    if (i >= s.size() || (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) return 0xFFFD;
    cp = (cp << 6) | (static_cast<unsigned char>(s[i++]) & 0x3F);
  }
  return cp;
}

}  // namespace

std::string PythonJsonString(std::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\') {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; ++i; continue;
      case '\\': out += "\\\\"; ++i; continue;
      case '\n': out += "\\n"; ++i; continue;
      case '\r': out += "\\r"; ++i; continue;
      case '\t': out += "\\t"; ++i; continue;
      case '\b': out += "\\b"; ++i; continue;
      case '\f': out += "\\f"; ++i; continue;
      default: break;
    }
    const uint32_t cp = NextCodePoint(s, i);
    if (cp >= 0x10000) {  // a surrogate pair, as Python writes it
      AppendU(out, 0xD800 + ((cp - 0x10000) >> 10));
      AppendU(out, 0xDC00 + ((cp - 0x10000) & 0x3FF));
    } else {
      AppendU(out, cp);
    }
  }
  return out + "\"";
}

std::string TaskLine(std::string_view prompt, std::string_view answer) {
  return "{\"prompt\": " + PythonJsonString(prompt) + ", \"answer\": " + PythonJsonString(answer) + "}\n";
}

}  // namespace multiscreen::eval
