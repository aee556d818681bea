#include "eval/yarn.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace multiscreen::eval {

absl::StatusOr<YarnFlag> ParseYarnFactor(const std::string& text, bool transformer, const std::string& model_name) {
  YarnFlag f;
  if (text == "auto") {
    f.automatic = true;
  } else if (!absl::SimpleAtod(text, &f.factor) || !std::isfinite(f.factor) || f.factor < 1.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--yarn_factor=", text, ": expected a number >= 1 (1: plain RoPE) or auto (evaluation length / training length)"));
  }
  f.given = f.automatic || f.factor != 1.0;
  if (f.given && !transformer) {
    return absl::InvalidArgumentError(absl::StrCat("--yarn_factor=", text, ": model ", model_name,
                                                   " is Multiscreen: --yarn_factor is YaRN for softmax attention with "
                                                   "RoPE (the Transformer baseline); screening has no softmax temperature "
                                                   "for it to scale"));
  }
  return f;
}

double ContextMatchedYarnFactor(int64_t eval_len, int64_t train_len) {
  return std::max(1.0, double(eval_len) / double(train_len));
}

}  // namespace multiscreen::eval
