#include "eval/yarn.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace multiscreen::eval {

absl::StatusOr<YarnFlag> ParseYarnFactor(const std::string& text, bool transformer, kernels::PositionKind position,
                                         const std::string& model_name) {
  YarnFlag f;
  if (text == "auto") {
    f.automatic = true;
  } else if (!absl::SimpleAtod(text, &f.factor) || !std::isfinite(f.factor) || f.factor < 1.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--yarn_factor=", text, ": expected a number >= 1 (1: plain RoPE) or auto (evaluation length / training length)"));
  }
  f.given = f.automatic || f.factor != 1.0;
  if (f.given && !transformer && position != kernels::PositionKind::kRope) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--yarn_factor=", text, ": model ", model_name, " is Multiscreen with position: ",
        position == kernels::PositionKind::kNope ? "NOPE" : "MIPE",
        ", which has no RoPE for YaRN to rescale (--yarn_factor takes a Transformer or a Multiscreen model with "
        "position: ROPE)"));
  }
  return f;
}

double ContextMatchedYarnFactor(int64_t eval_len, int64_t train_len) {
  return std::max(1.0, double(eval_len) / double(train_len));
}

}  // namespace multiscreen::eval
