// Reading a number a person typed as a decimal: the one parser of the CLI's
// floating-point flags (cli/flags.cc checks every double flag with it) and of the
// numbers inside string flags (--yarn_factor, --depths).
// strtod and absl::SimpleAtod, which absl's double flags use, also take hex floats
// ("0x2" is 2), "inf", "nan", "infinity" and surrounding blanks; none of those is a
// number anybody means on a command line, and inf or nan pass range checks written as
// `x > lo` or `!(x < hi)`.
#pragma once

#include <charconv>
#include <cmath>
#include <string>
#include <string_view>
#include <system_error>

namespace multiscreen {

// Whether `text` is a plain decimal number: an optional sign, digits with an optional
// fraction (or a fraction alone: ".5"), and an optional exponent (e or E, an optional
// sign, digits), nothing else; its value finite. Writes the value to *value when it is.
inline bool ParseDecimal(std::string_view text, double* value) {
  size_t i = 0;
  auto digits = [&] {
    const size_t start = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    return i - start;
  };
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
  const size_t body = i;
  size_t mantissa = digits();
  if (i < text.size() && text[i] == '.') {
    ++i;
    mantissa += digits();
  }
  if (mantissa == 0) return false;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  if (i != text.size()) return false;
  double x = 0;
  // from_chars takes no leading '+': the sign is applied here.
  const auto [end, error] = std::from_chars(text.data() + body, text.data() + text.size(), x);
  if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(x)) return false;
  *value = body > 0 && text[0] == '-' ? -x : x;
  return true;
}

// `x` as a person would type it back: the shortest digits that read back as exactly x, in
// fixed notation below 10^16 in magnitude ("10000001", "0.25", "1e-05" is "0.00001"),
// scientific above. absl::StrCat's six significant digits printed 10000001 as "1e+07"
// in a message refusing it against a bound of 10^7 (issue 43).
inline std::string PlainDecimal(double x) {
  char text[400];
  const bool fixed = std::isfinite(x) && std::fabs(x) < 1e16;
  const auto end = fixed ? std::to_chars(text, text + sizeof(text), x, std::chars_format::fixed).ptr
                         : std::to_chars(text, text + sizeof(text), x).ptr;
  return std::string(text, end);
}

}  // namespace multiscreen
