#include "eval/yarn.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/decimal.h"

namespace multiscreen::eval {

absl::StatusOr<YarnFlag> ParseYarnFactor(const std::string& text, const ModelDims& dims) {
  YarnFlag f;
  if (text == "auto") {
    f.automatic = true;
  } else if (!ParseDecimal(text, &f.factor) || !(f.factor >= 1.0 && f.factor <= kMaxYarnFactor)) {
    return absl::InvalidArgumentError(absl::StrCat("--yarn_factor=", text, ": expected a decimal number in [1, ",
                                                   kMaxYarnFactor,
                                                   "] (1: plain RoPE) or auto (evaluation length / training length)"));
  }
  f.given = f.automatic || f.factor != 1.0;
  if (f.given && !dims.has_rope()) {
    const std::string what =
        dims.transformer() ? "a Transformer with attention: SCREENING"
                           : absl::StrCat("Multiscreen with position: ",
                                          dims.position == kernels::PositionKind::kNope ? "NOPE" : "MIPE");
    return absl::InvalidArgumentError(absl::StrCat(
        "--yarn_factor=", text, ": model ", dims.name, " is ", what,
        ", which has no RoPE for YaRN to rescale (--yarn_factor takes a RoPE Transformer or a Multiscreen model with "
        "position: ROPE)"));
  }
  return f;
}

double ContextMatchedYarnFactor(int64_t eval_len, int64_t train_len) {
  return std::max(1.0, double(eval_len) / double(train_len));
}

absl::StatusOr<double> YarnFactorFor(const YarnFlag& flag, int64_t eval_len, int64_t train_len) {
  if (!flag.automatic) return flag.factor;
  const double f = ContextMatchedYarnFactor(eval_len, train_len);
  if (f > kMaxYarnFactor) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--yarn_factor=auto: the context-matched factor ", eval_len, " / ", train_len, " = ", f,
        " (evaluation length / training length) is above ", kMaxYarnFactor,
        ", the largest factor YaRN takes (fp32 RoPE resolves no finer): evaluate shorter, or give --train_len"));
  }
  return f;
}

absl::StatusOr<kernels::cpu::YarnRamp> ParseYarnRamp(const std::string& text, const YarnFlag& yarn) {
  if (text == "paper") return kernels::cpu::YarnRamp::kPaper;
  if (text != "code") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--yarn_ramp=", text, ": expected paper (YaRN's equation, linear in the turns r) or code (its authors' code, "
        "linear in the pair index)"));
  }
  if (!yarn.given) {
    return absl::InvalidArgumentError(
        "--yarn_ramp=code: YaRN is off (no --yarn_factor, or 1), so there is no ramp to choose; give --yarn_factor=F|auto");
  }
  return kernels::cpu::YarnRamp::kCode;
}

}  // namespace multiscreen::eval
