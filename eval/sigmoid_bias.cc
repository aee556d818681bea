#include "eval/sigmoid_bias.h"

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace multiscreen::eval {

absl::StatusOr<SigmoidBiasFlag> ParseSigmoidBiasLength(const std::string& text, const ModelDims& dims) {
  SigmoidBiasFlag f;
  if (text.empty()) return f;
  constexpr int64_t kMaxLength = int64_t{1} << 40;
  bool digits = !text.empty() && text.size() <= 19;
  for (char c : text) digits = digits && c >= '0' && c <= '9';
  if (text == "auto") {
    f.automatic = true;
  } else if (!digits || !absl::SimpleAtoi(text, &f.length) || f.length < 1 || f.length > kMaxLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sigmoid_bias_length=", text, ": expected a whole number of tokens in [1, 2^40] (the n of sigmoid "
        "attention's bias -log n) or auto (each evaluation's length)"));
  }
  if (!dims.transformer() || dims.attention != AttentionKind::kSigmoid) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sigmoid_bias_length=", text, ": model ", dims.name, " has ",
        dims.transformer() ? absl::StrCat("attention ", AttentionKindName(dims.attention)) : "no attention (Multiscreen)",
        "; the flag sets the bias of attention: SIGMOID"));
  }
  if (dims.sigmoid_bias == SigmoidBias::kPerQuery) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sigmoid_bias_length=", text, ": model ", dims.name,
        " has sigmoid_bias per_query (each query's n is its own key count): there is no length to set"));
  }
  return f;
}

int64_t SigmoidBiasLengthFor(const SigmoidBiasFlag& flag, int64_t eval_len) {
  return flag.automatic ? eval_len : flag.length;
}

}  // namespace multiscreen::eval
