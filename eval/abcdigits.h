// ABCDigits (spec "Evaluations"): lines `L=dddddd`, one 6-digit value per letter A–Z; the
// letter drawn with weight 0 is the target, hidden once at a relative depth and asked again
// on the last line. This is the author's public generator (ken-nakanishi/abcdigits,
// abcdigits.py, MIT) re-run in C++ on eval/python_random.h: for the same arguments it
// returns the same texts, byte for byte, in both length modes:
//   lines:  a fixed number of lines (n_lines ≥ 50);
//   tokens: lines are added until the text reaches n_tokens GPT-2 tokens (as counted line by
//           line, so the text's own count may differ slightly).
// One generator (seeded once) makes all n_trials instances in turn: instance i depends on
// the ones before it, so the first K of n_trials = 1000 are the instances of n_trials = K.
// tools/abcdigits_reference.py runs the same algorithm in Python (random.Random) and wrote
// the golden files tests/eval/testdata/abcdigits_*.jsonl that tests/eval/abcdigits_test.cc
// compares with.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace multiscreen::eval {

struct AbcDigitsOptions {
  double depth = 0.5;     // target line's insertion index = int(len · depth), in [0, 1]
  int64_t n_digits = 6;   // digits per value (values in [10^(n−1), 10^n))
  int64_t n_trials = 1000;
  uint64_t seed = 123;    // the author's; other seeds for tests
};

// generate_by_line_count(n_lines, depth, n_digits, n_trials): the full texts (the final
// newline stripped). Error (naming --length) when n_lines < 50.
absl::StatusOr<std::vector<std::string>> AbcDigitsByLines(int64_t n_lines, const AbcDigitsOptions& options);

// generate_by_token_count(n_tokens, depth, tokenizer, n_digits, n_trials); token_count(line)
// is the number of tokens of one line "L=dddddd\n" without special tokens. Error (naming
// --length) when n_tokens ≤ 2 × the 27 lines every instance needs (the author's assert).
absl::StatusOr<std::vector<std::string>> AbcDigitsByTokens(
    int64_t n_tokens, const AbcDigitsOptions& options, const std::function<int64_t(const std::string&)>& token_count);

// The model's prompt and the expected answer of a text: all but its last n_digits
// characters, and those characters.
struct PromptAnswer {
  std::string prompt, answer;
};
PromptAnswer SplitAnswer(const std::string& text, int64_t n_digits);

}  // namespace multiscreen::eval
