// `multiscreen eval abcdigits`: the ABCDigits retrieval grid (eval/abcdigits.h) over
// --contexts × --depths (cli/eval_grid.h), or with --generate_only one cell's instances
// written to --dump without a model.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "cli/eval_common.h"
#include "cli/eval_grid.h"
#include "cli/flags.h"
#include "cli/run_data.h"
#include "common/text_file.h"
#include "eval/abcdigits.h"
#include "eval/task_dump.h"

ABSL_FLAG(bool, generate_only, false, "eval abcdigits: write the instances of one cell to --dump, no model");
ABSL_FLAG(std::string, mode, "tokens", "eval abcdigits: length in lines | tokens (GPT-2)");
ABSL_FLAG(int64_t, length, 0, "eval abcdigits --generate_only: lines or tokens of the cell");
ABSL_FLAG(double, depth, 0.5, "eval abcdigits --generate_only: depth of the cell");

namespace multiscreen::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = EvalClock;

absl::StatusOr<std::vector<TaskInstance>> AbcInstances(const std::string& mode, int64_t length, double depth, int64_t n,
                                                       const Gpt2Tokenizer* tok) {
  eval::AbcDigitsOptions o;
  o.depth = depth;
  o.n_trials = n;
  o.seed = absl::GetFlag(FLAGS_generator_seed);
  absl::StatusOr<std::vector<std::string>> texts =
      mode == "lines" ? eval::AbcDigitsByLines(length, o) : eval::AbcDigitsByTokens(length, o, TokenCounter(*tok));
  if (!texts.ok()) return texts.status();
  std::vector<TaskInstance> out;
  for (const std::string& t : *texts) {
    const eval::PromptAnswer pa = eval::SplitAnswer(t, o.n_digits);
    out.push_back({pa.prompt, pa.answer});
  }
  return out;
}


}  // namespace

int EvalAbcDigits(const std::vector<std::string>& given) {
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode != "lines" && mode != "tokens") {
    return Fail("eval abcdigits", absl::InvalidArgumentError(absl::StrCat("--mode=", mode, ": expected lines or tokens")));
  }
  if (absl::GetFlag(FLAGS_generate_only)) {
    // --generate_only runs no model: a model's or a grid's flag beside it was ignored
    // without a word (`--generate_only --checkpoint=X` looked like an evaluation of X).
    for (const char* unused : {"checkpoint", "weights", "train_len", "as_learned", "yarn_factor", "yarn_ramp",
                               "sigmoid_bias_length", "device", "precision",
                               "contexts", "depths", "plot", "resume", "out", "threads"}) {
      if (Given(given, unused)) {
        return Fail("eval abcdigits", absl::InvalidArgumentError(absl::StrCat(
                                          "--", unused, " with --generate_only: it writes one cell's instances to --dump "
                                          "alone, without a model or a grid (--length, --depth); drop --", unused,
                                          ", or drop --generate_only to evaluate")));
      }
    }
    const std::string dump = absl::GetFlag(FLAGS_dump);
    if (dump.empty()) return Fail("eval abcdigits", absl::InvalidArgumentError("--generate_only needs --dump=F.jsonl"));
    if (auto s = CheckDumpPath(dump, absl::GetFlag(FLAGS_out), "abcdigits"); !s.ok()) return Fail("eval abcdigits", s);
    if (!Given(given, "length")) return Fail("eval abcdigits", absl::InvalidArgumentError("--generate_only needs --length=N"));
    if (const int64_t length = absl::GetFlag(FLAGS_length); length < 1) {
      return Fail("eval abcdigits", absl::InvalidArgumentError(absl::StrCat("--length=", length, ": must be >= 1")));
    }
    std::unique_ptr<Gpt2Tokenizer> tok;
    if (mode == "tokens") {
      auto t = LoadRunTokenizer(given, "");
      if (!t.ok()) return Fail("eval abcdigits", t.status());
      tok = std::move(*t);
    }
    auto instances = AbcInstances(mode, absl::GetFlag(FLAGS_length), absl::GetFlag(FLAGS_depth), absl::GetFlag(FLAGS_instances), tok.get());
    if (!instances.ok()) return Fail("eval abcdigits", instances.status());
    std::string text;
    for (const TaskInstance& inst : *instances) text += eval::TaskLine(inst.prompt, inst.answer);
    if (auto s = WriteTextFile(dump, text); !s.ok()) return Fail("eval abcdigits", s);
    std::printf("eval abcdigits: %zu instances (%s mode, length %lld, depth %g, seed %llu) written to %s\n", instances->size(),
                mode.c_str(), static_cast<long long>(absl::GetFlag(FLAGS_length)), absl::GetFlag(FLAGS_depth),
                static_cast<unsigned long long>(absl::GetFlag(FLAGS_generator_seed)), dump.c_str());
    return 0;
  }
  auto setup = Setup(given, true);
  if (!setup.ok()) return Fail("eval abcdigits", setup.status());
  const Gpt2Tokenizer* tok = setup->tokenizer.get();
  GridTask task;
  task.name = "abcdigits";
  task.max_new = 6;
  task.tokens_per_unit = mode == "lines" ? 9 : 1;  // "L=dddddd\n": letter, "=", at most 6 digit tokens, newline
  task.mode = mode;
  task.make = [&](int64_t c, double d, int64_t n) { return AbcInstances(mode, c, d, n, tok); };
  // Exact match of the first 6 characters the 6 greedy tokens spell.
  task.shown = [](const std::string& out) { return out.substr(0, 6); };
  task.score = [](const std::string& out, const std::string& answer) { return out.substr(0, answer.size()) == answer; };
  return RunGrid(task, *setup);
}

}  // namespace multiscreen::cli
