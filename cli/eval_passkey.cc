// `multiscreen eval passkey`: passkey retrieval (eval/passkey.h) over --contexts ×
// --depths (cli/eval_grid.h).
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "cli/eval_common.h"
#include "cli/eval_grid.h"
#include "cli/flags.h"
#include "eval/passkey.h"

namespace multiscreen::cli {

int EvalPasskey(const std::vector<std::string>& given) {
  auto setup = Setup(given, true);
  if (!setup.ok()) return Fail("eval passkey", setup.status());
  const Gpt2Tokenizer* tok = setup->tokenizer.get();
  GridTask task;
  task.name = "passkey";
  task.max_new = 8;
  task.make = [&](int64_t c, double d, int64_t n) -> absl::StatusOr<std::vector<TaskInstance>> {
    auto inst = eval::PasskeyInstances(c, d, n, absl::GetFlag(FLAGS_generator_seed), TokenCounter(*tok));
    if (!inst.ok()) return inst.status();
    std::vector<TaskInstance> out;
    for (auto& i : *inst) out.push_back({std::move(i.prompt), std::move(i.answer)});
    return out;
  };
  task.shown = [](const std::string& out) { return out; };
  task.score = [](const std::string& out, const std::string& answer) { return eval::PasskeyCorrect(out, answer); };
  return RunGrid(task, *setup);
}

}  // namespace multiscreen::cli
