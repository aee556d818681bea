// --sigmoid_bias_length of `eval` and `generate` (issue 43): the n of sigmoid attention's
// bias b = −log n at inference (kernels/cpu/attention.h; docs/attention.md), for a
// Transformer with attention SIGMOID and sigmoid_bias TRAIN_LENGTH. Ramapuram et al.
// (arXiv 2409.04431) set b = −log n with n the sequence length, one constant that the
// model trains with; past the training length the Multiscreen paper's Table 7 gives sigmoid
// a "method-specific" inference-time scaling beside YaRN, which this flag is: not given,
// n stays the training length (--train_len, or the run's record); a number sets n; auto
// sets n to each evaluation's length (the context-matched rule, as --yarn_factor=auto).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/config.h"

namespace multiscreen::eval {

struct SigmoidBiasFlag {
  bool automatic = false;  // "auto": n = the evaluation's length
  int64_t length = 0;      // the given n when !automatic; 0: not given (the training length)
};

// Parses the flag's text ("" when not given) for the model `dims`. Errors (one line, naming
// --sigmoid_bias_length): not "auto" nor a decimal integer in [1, 2^40]; given for a model
// whose attention is not SIGMOID, or whose sigmoid_bias is PER_QUERY (its n is the query's
// own key count, nothing to set).
absl::StatusOr<SigmoidBiasFlag> ParseSigmoidBiasLength(const std::string& text, const ModelDims& dims);

// InferenceOptions::sigmoid_bias_length for an evaluation of eval_len tokens: eval_len for
// auto, the given n, else 0 (the training length).
int64_t SigmoidBiasLengthFor(const SigmoidBiasFlag& flag, int64_t eval_len);

}  // namespace multiscreen::eval
