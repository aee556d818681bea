// The (context, depth) grid that `eval abcdigits` and `eval passkey` share: per cell K
// instances made by the task's generator, each prompt continued greedily with the decoding
// cache on the runner's device and scored by the task; results written as each cell
// finishes (--out/<task>.json and .csv, --dump's JSONL), --resume skipping the cells there.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/eval_common.h"
#include "data/gpt2_tokenizer.h"

ABSL_DECLARE_FLAG(int64_t, instances);  // instances per cell (abcdigits --generate_only: of its one cell)
ABSL_DECLARE_FLAG(std::string, dump);   // JSONL of the instances (and the model's outputs)

namespace multiscreen::cli {

struct TaskInstance {
  std::string prompt, answer;
};

struct GridTask {
  const char* name;     // "abcdigits" | "passkey"
  int64_t max_new = 6;  // tokens generated
  int64_t tokens_per_unit = 1;  // prompt tokens per unit of --contexts (abcdigits --mode=lines: ≤ 9 per line)
  std::string mode = "tokens";  // what --contexts counts (abcdigits --mode), recorded in the identity
  std::function<absl::StatusOr<std::vector<TaskInstance>>(int64_t context, double depth, int64_t instances)> make;
  std::function<bool(const std::string& output, const std::string& answer)> score;
  std::function<std::string(const std::string& output)> shown;  // what the dump records as the output
};

// Runs `task` over --contexts × --depths with --instances per cell on `setup`'s model,
// prints the accuracy table and returns the exit code (0, or 1 after a one-line error:
// a bad list flag, a context the generator cannot fill or whose decoding cache does not
// fit, a --resume of another evaluation).
int RunGrid(const GridTask& task, EvalSetup& setup);

// Counts the GPT-2 tokens of a text with `tok` (0 when it cannot be encoded): the
// generators' measure of a prompt's length.
std::function<int64_t(const std::string&)> TokenCounter(const Gpt2Tokenizer& tok);

// --dump (a file the grids write): refused where CheckOutputFile refuses an output (a
// directory, FIFO or device; the weights; a training run's own file; inside a checkpoint)
// and where it is one of the results files `task` writes into --out (<task>.json, .csv).
absl::Status CheckDumpPath(const std::string& dump, const std::string& out, const std::string& task);

}  // namespace multiscreen::cli
