#include "eval/passkey.h"

#include <cctype>

#include "absl/strings/str_cat.h"
#include "eval/python_random.h"

namespace multiscreen::eval {
namespace {
constexpr char kIntro[] =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the important information there.";
constexpr char kFiller[] = " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
constexpr char kQuestion[] = " What is the pass key? The pass key is";
std::string KeySentence(const std::string& key) {
  return absl::StrCat(" The pass key is ", key, ". Remember it. ", key, " is the pass key.");
}
}  // namespace

absl::StatusOr<std::vector<PasskeyInstance>> PasskeyInstances(
    int64_t n_tokens, double depth, int64_t n_trials, uint64_t seed,
    const std::function<int64_t(const std::string&)>& token_count) {
  if (!(depth >= 0 && depth <= 1)) return absl::InvalidArgumentError(absl::StrCat("--depth=", depth, ": must be in [0, 1]"));
  const int64_t fixed = token_count(kIntro) + token_count(KeySentence("12345")) + token_count(kQuestion);
  const int64_t unit = token_count(kFiller);
  const int64_t units = (n_tokens - fixed) / unit;
  if (units < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--length=", n_tokens, ": a passkey prompt needs at least ", fixed + unit, " tokens"));
  }
  const auto before = static_cast<int64_t>(static_cast<double>(units) * depth);
  PythonRandom rng(seed);
  std::vector<PasskeyInstance> out;
  for (int64_t t = 0; t < n_trials; ++t) {
    const std::string key = std::to_string(rng.RandRange(10000, 100000));
    PasskeyInstance inst;
    inst.prompt = kIntro;
    for (int64_t i = 0; i < before; ++i) inst.prompt += kFiller;
    inst.prompt += KeySentence(key);
    for (int64_t i = before; i < units; ++i) inst.prompt += kFiller;
    inst.prompt += kQuestion;
    inst.answer = key;
    out.push_back(std::move(inst));
  }
  return out;
}

bool PasskeyCorrect(const std::string& continuation, const std::string& answer) {
  size_t i = 0;
  while (i < continuation.size() && continuation[i] == ' ') ++i;
  if (continuation.compare(i, answer.size(), answer) != 0) return false;
  const size_t after = i + answer.size();
  return after >= continuation.size() || !std::isdigit(static_cast<unsigned char>(continuation[after]));
}

}  // namespace multiscreen::eval
