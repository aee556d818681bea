#include "eval/abcdigits.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "eval/python_random.h"

namespace multiscreen::eval {
namespace {

int64_t Pow10(int64_t n) {
  int64_t p = 1;
  while (n-- > 0) p *= 10;
  return p;
}

// The part both modes share up to the target: 26 distinct values (sample), the lines
// "A=v\n".., the weights [0, 2^0, …, 2^24] shuffled over the letters; the target is the
// letter that drew 0.
struct Instance {
  std::vector<std::string> lines;
  std::vector<int64_t> weights;
  int64_t needle = 0;
};

Instance Begin(PythonRandom& rng, int64_t n_digits) {
  Instance inst;
  const std::vector<int64_t> values = rng.SampleRange(Pow10(n_digits - 1), Pow10(n_digits), 26);
  for (int64_t i = 0; i < 26; ++i) inst.lines.push_back(absl::StrCat(std::string(1, char('A' + i)), "=", values[i], "\n"));
  inst.weights.push_back(0);
  for (int i = 0; i < 25; ++i) inst.weights.push_back(int64_t{1} << i);
  rng.Shuffle(inst.weights);
  inst.needle = std::find(inst.weights.begin(), inst.weights.end(), 0) - inst.weights.begin();
  return inst;
}

// Shuffles the filler indices, inserts the target at int(len · depth), appends it again,
// joins the lines and strips the trailing newline (Python's rstrip()).
std::string Finish(PythonRandom& rng, const Instance& inst, std::vector<int64_t> idxs, double depth) {
  rng.Shuffle(idxs);
  const auto at = static_cast<int64_t>(static_cast<double>(idxs.size()) * depth);
  idxs.insert(idxs.begin() + at, inst.needle);
  idxs.push_back(inst.needle);
  std::string text;
  for (int64_t i : idxs) text += inst.lines[i];
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

std::vector<int64_t> AllBut(int64_t needle) {
  std::vector<int64_t> idxs;
  for (int64_t i = 0; i < 26; ++i) {
    if (i != needle) idxs.push_back(i);
  }
  return idxs;
}

absl::Status CheckOptions(const AbcDigitsOptions& o) {
  if (!(o.depth >= 0 && o.depth <= 1)) return absl::InvalidArgumentError(absl::StrCat("--depth=", o.depth, ": must be in [0, 1]"));
  if (o.n_digits < 1 || o.n_digits > 15) return absl::InvalidArgumentError(absl::StrCat("n_digits=", o.n_digits, ": must be in [1, 15]"));
  if (o.n_digits == 1) return absl::InvalidArgumentError("n_digits=1: 26 distinct values need at least 2 digits");
  if (o.n_trials < 0) return absl::InvalidArgumentError(absl::StrCat("--instances=", o.n_trials, ": must be >= 0"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> AbcDigitsByLines(int64_t n_lines, const AbcDigitsOptions& options) {
  if (auto s = CheckOptions(options); !s.ok()) return s;
  if (n_lines < 50) return absl::InvalidArgumentError(absl::StrCat("--length=", n_lines, ": lines mode needs at least 50 lines"));
  PythonRandom rng(options.seed);
  std::vector<std::string> out;
  for (int64_t t = 0; t < options.n_trials; ++t) {
    const Instance inst = Begin(rng, options.n_digits);
    std::vector<int64_t> idxs = AllBut(inst.needle);
    for (int64_t i : rng.Choices(inst.weights, n_lines - 27)) idxs.push_back(i);
    out.push_back(Finish(rng, inst, std::move(idxs), options.depth));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> AbcDigitsByTokens(
    int64_t n_tokens, const AbcDigitsOptions& options, const std::function<int64_t(const std::string&)>& token_count) {
  if (auto s = CheckOptions(options); !s.ok()) return s;
  PythonRandom rng(options.seed);
  std::vector<std::string> out;
  for (int64_t t = 0; t < options.n_trials; ++t) {
    const Instance inst = Begin(rng, options.n_digits);
    std::vector<int64_t> lengths(26);
    int64_t tok_len = 0;
    for (int64_t i = 0; i < 26; ++i) tok_len += lengths[i] = token_count(inst.lines[i]);
    tok_len += lengths[inst.needle];
    if (tok_len * 2 >= n_tokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("--length=", n_tokens, ": tokens mode needs more than twice the ", tok_len,
                       " tokens of the 27 lines every instance holds (instance ", t, ")"));
    }
    std::vector<int64_t> idxs = AllBut(inst.needle);
    while (tok_len < n_tokens) {
      const int64_t i = rng.Choices(inst.weights, 1)[0];
      idxs.push_back(i);
      tok_len += lengths[i];
    }
    out.push_back(Finish(rng, inst, std::move(idxs), options.depth));
  }
  return out;
}

PromptAnswer SplitAnswer(const std::string& text, int64_t n_digits) {
  const size_t cut = text.size() >= static_cast<size_t>(n_digits) ? text.size() - n_digits : 0;
  return {text.substr(0, cut), text.substr(cut)};
}

}  // namespace multiscreen::eval
