// --yarn_factor of `eval` and `generate` (issue 30): YaRN's scale factor F for a RoPE
// model at inference (the equations and their source: kernels/cpu/rope.h), a decimal
// number in [1, kMaxYarnFactor = 1024], or "auto", the paper's "context-matched" factor
// F = max(1, evaluation length / training length) (Peng et al. 2023 scale s = L'/L; the
// Multiscreen paper's Figs. 4, 5, 17, 18 compare against it). Models with RoPE take it: the Transformer (frequencies and
// its logit temperature) and Multiscreen with position: ROPE (the frequencies only, no
// temperature: docs/ablations.md, the paper's Figs. 21–22); Multiscreen with MIPE or NOPE
// and the Transformer with attention SCREENING (MiPE, no RoPE) have none to rescale and are
// refused.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/config.h"
#include "kernels/cpu/rope.h"

namespace multiscreen::eval {

struct YarnFlag {
  bool automatic = false;  // "auto": ContextMatched per evaluation length
  double factor = 1.0;     // the given F when !automatic
  bool given = false;      // anything but the default "1"
};

// The largest F --yarn_factor takes. YaRN divides the slowest RoPE pairs' frequencies by F;
// the slowest pair of any head width turns θ_p > 10⁻⁴ rad per position (θ_p =
// 10⁴^(−2p/d_h), 2p < d_h), interpolated θ_p/F. Rotated fp32 q and k change between
// adjacent positions in that pair by about θ_p/F of their size, which fp32 resolves only
// above its relative precision 2⁻²⁴ ≈ 6·10⁻⁸: F < 10⁻⁴/(6·10⁻⁸) ≈ 1,700. 2¹⁰ keeps a
// margin, and at the paper's L = 4,096 it already aims at 4M-token contexts. `auto`, F =
// max(1, length/L) per evaluation, is held to the same bound (YarnFactorFor).
inline constexpr double kMaxYarnFactor = 1024;

// Parses the flag's text for the model `dims`. Errors (one line, naming --yarn_factor): not
// "auto" nor a decimal number (common/decimal.h: no hex, inf, nan or blanks) in [1,
// kMaxYarnFactor]; given (≠ 1, or auto) for a model without RoPE (dims.has_rope()).
absl::StatusOr<YarnFlag> ParseYarnFactor(const std::string& text, const ModelDims& dims);

// F = max(1, eval_len / train_len).
double ContextMatchedYarnFactor(int64_t eval_len, int64_t train_len);

// The factor of `flag` for an evaluation of eval_len tokens. Error (one line naming
// --yarn_factor=auto, the factor and both lengths): auto's factor above kMaxYarnFactor.
absl::StatusOr<double> YarnFactorFor(const YarnFlag& flag, int64_t eval_len, int64_t train_len);

// --yarn_ramp: which ramp γ YaRN's NTK-by-parts uses (kernels/cpu/rope.h YarnRamp): "paper"
// (the default, the paper's equation, linear in r) or "code" (the authors' code and Hugging
// Face's, linear in the pair index with floor/ceil bounds). Errors (one line, naming
// --yarn_ramp): another word; "code" without a --yarn_factor (`yarn`: not given), which
// would change nothing.
absl::StatusOr<kernels::cpu::YarnRamp> ParseYarnRamp(const std::string& text, const YarnFlag& yarn);

}  // namespace multiscreen::eval
