// --yarn_factor of `eval` and `generate` (issue 30): YaRN's scale factor F for a RoPE
// model at inference (the equations and their source: kernels/cpu/rope.h), a number ≥ 1,
// or "auto", the paper's "context-matched" factor F = max(1, evaluation length /
// training length) (Peng et al. 2023 scale s = L'/L; the Multiscreen paper's Figs. 4, 5,
// 17, 18 compare against it). Models with RoPE take it: the Transformer (frequencies and
// its logit temperature) and Multiscreen with position: ROPE (the frequencies only, no
// temperature: docs/ablations.md, the paper's Figs. 21–22); Multiscreen with MIPE or NOPE
// and the Transformer with attention SCREENING (MiPE, no RoPE) have none to rescale and are
// refused.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/config.h"

namespace multiscreen::eval {

struct YarnFlag {
  bool automatic = false;  // "auto": ContextMatched per evaluation length
  double factor = 1.0;     // the given F when !automatic
  bool given = false;      // anything but the default "1"
};

// Parses the flag's text for the model `dims`. Errors (one line, naming --yarn_factor): not
// a number ≥ 1 nor "auto"; given (≠ 1, or auto) for a model without RoPE (dims.has_rope()).
absl::StatusOr<YarnFlag> ParseYarnFactor(const std::string& text, const ModelDims& dims);

// F = max(1, eval_len / train_len).
double ContextMatchedYarnFactor(int64_t eval_len, int64_t train_len);

// The factor of `flag` for an evaluation of eval_len tokens.
inline double YarnFactorFor(const YarnFlag& flag, int64_t eval_len, int64_t train_len) {
  return flag.automatic ? ContextMatchedYarnFactor(eval_len, train_len) : flag.factor;
}

}  // namespace multiscreen::eval
