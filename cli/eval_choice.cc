// `multiscreen eval choice`: zero-shot multiple choice (eval/choice.h: HellaSwag, PIQA,
// ARC, WinoGrande as lm-evaluation-harness scores them) with the full forward of the
// runner's device; --out/choice_STEM.json (the summary) and choice_STEM.jsonl (per item).
#include <algorithm>
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
#include "cli/flags.h"
#include "common/text_file.h"
#include "eval/choice.h"

ABSL_FLAG(std::string, task, "", "eval choice: the benchmark's JSONL file (one item per line)");

namespace multiscreen::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = EvalClock;

}  // namespace

int EvalChoice(const std::vector<std::string>& given) {
  const std::string task = absl::GetFlag(FLAGS_task);
  if (task.empty()) return Fail("eval choice", absl::InvalidArgumentError("--task=FILE.jsonl is required"));
  if (!Given(given, "format")) {
    return Fail("eval choice", absl::InvalidArgumentError("--format=hellaswag|piqa|arc|winogrande is required"));
  }
  auto format = eval::ParseChoiceFormat(absl::GetFlag(FLAGS_format));
  if (!format.ok()) return Fail("eval choice", format.status());
  if (!fs::is_regular_file(task)) return Fail("eval choice", absl::NotFoundError(absl::StrCat("--task=", task, ": not a regular file")));
  if (const int64_t seq_len = absl::GetFlag(FLAGS_seq_len); seq_len < 0) {
    return Fail("eval choice",
                absl::InvalidArgumentError(absl::StrCat("--seq_len=", seq_len, ": must be >= 0 (0: the training length)")));
  }
  auto items = eval::ReadChoiceFile(task, *format);
  if (!items.ok()) return Fail("eval choice", items.status());
  auto setup = Setup(given, true);
  if (!setup.ok()) return Fail("eval choice", setup.status());
  // The window of one scored sequence: --seq_len, else the training length (lm-eval's
  // max_length is the model's trained context).
  const int64_t max_len = absl::GetFlag(FLAGS_seq_len) > 0 ? absl::GetFlag(FLAGS_seq_len) : setup->options.train_len;
  if (auto s = setup->UseYarnFor(max_len); !s.ok()) return Fail("eval choice", s);
  eval::ModelRunner runner(setup->weights, setup->options, setup->device);
  // No sequence is longer than its bytes plus the EOS token (a token is at least one byte):
  // the memory needed is that of the longest item, when shorter than --seq_len.
  int64_t longest = 0;
  for (const eval::ChoiceItem& item : *items) {
    for (size_t k = 0; k < item.contexts.size(); ++k) {
      longest = std::max<int64_t>(longest, item.contexts[k].size() + item.continuations[k].size() + 1);
    }
  }
  // On a device against its free memory (the host holds the weights, the items and their scores only).
  const bool on_device = setup->device.device != Device::kCpu;
  const int64_t avail = on_device ? eval::DeviceFreeBytes() : eval::AvailableMemoryBytes(),
                need = runner.FullPassBytes(std::min(max_len, longest));
  if (avail > 0 && need > avail) {
    return Fail("eval choice", absl::ResourceExhaustedError(absl::StrCat("--seq_len=", max_len, ": the full pass needs about ",
                                                                         GiB(need), ", ", GiB(avail),
                                                                         on_device ? " free on the device" : " available")));
  }
  const int32_t eos = static_cast<int32_t>(setup->weights.dims.eos_token);
  const eval::TokenLossFn losses = [&runner](const int32_t* ids, int64_t n, float* out) { runner.TokenLossesFull(ids, n, out); };
  const std::string stem = fs::path(task).stem().string();
  const std::string items_path = absl::StrCat(setup->out, "/choice_", stem, ".jsonl");
  const std::string summary_path = absl::StrCat(setup->out, "/choice_", stem, ".json");
  // Outputs are named by the task file's base name: a summary of another task of the same
  // name in --out is refused rather than overwritten (the same task's is a re-run).
  std::error_code ec;
  const std::string task_abs = fs::weakly_canonical(fs::absolute(task), ec).string();
  if (const json old = ReadJsonFile(summary_path); old.is_object()) {
    const std::string old_task = old.value("task_path", old.value("task", std::string()));
    if (old_task != task_abs && old_task != task) {
      return Fail("eval choice", absl::AlreadyExistsError(absl::StrCat(
                                     "--out=", setup->out, " already holds ", summary_path, " of --task=", old_task,
                                     ", not of --task=", task, " (same base name): give another --out")));
    }
  }
  // Both files are written once scoring finished, each through a temporary and a rename:
  // a failed run leaves an earlier run's pair as it was.
  std::string per_item;
  std::vector<eval::ChoiceScore> scores;
  const auto start = Clock::now();
  auto last_report = start;
  for (size_t i = 0; i < items->size(); ++i) {
    const eval::ChoiceItem& item = (*items)[i];
    auto score = eval::ScoreChoiceItem(item, absl::StrCat(task, ":", item.line), *setup->tokenizer, eos, max_len, losses);
    if (!score.ok()) return Fail("eval choice", score.status());
    per_item += json({{"index", i}, {"line", item.line}, {"loglik", score->loglik}, {"tokens", score->tokens},
                      {"chars", score->chars}, {"pred", score->pred}, {"pred_norm", score->pred_norm}, {"gold", item.gold},
                      {"correct", score->pred == item.gold}, {"correct_norm", score->pred_norm == item.gold},
                      {"truncated", score->truncated}})
                    .dump() +
                "\n";
    scores.push_back(std::move(*score));
    if (Seconds(last_report) > 10) {
      last_report = Clock::now();
      const double rate = (i + 1) / Seconds(start);
      std::fprintf(stderr, "eval choice: %zu/%zu items, %.1f items/s, ETA %s\n", i + 1, items->size(), rate,
                   Duration((items->size() - i - 1) / rate).c_str());
    }
  }
  const eval::ChoiceSummary sum = eval::SummarizeChoices(*items, scores);
  auto number = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  json result = SetupJson(*setup);
  result.update({{"task", task}, {"format", eval::ChoiceFormatName(*format)}, {"seq_len", max_len}, {"n", sum.n},
                 {"acc", number(sum.acc)}, {"acc_stderr", number(sum.acc_stderr)}, {"acc_norm", number(sum.acc_norm)},
                 {"acc_norm_stderr", number(sum.acc_norm_stderr)}, {"correct", sum.correct}, {"correct_norm", sum.correct_norm},
                 {"truncated", sum.truncated}, {"seconds", Seconds(start)}, {"items", items_path}, {"task_path", task_abs}});
  if (auto s = WriteTextFile(items_path, per_item); !s.ok()) return Fail("eval choice", s);
  if (auto s = WriteTextFile(summary_path, result.dump(1)); !s.ok()) return Fail("eval choice", s);
  std::printf("eval choice: %s, %lld items of %s (%s format), %s windows (train_len %lld), seq_len %lld, %s, %s\n",
              setup->weights.dims.name.c_str(), static_cast<long long>(sum.n), task.c_str(), eval::ChoiceFormatName(*format),
              setup->options.expand_windows ? "expanded" : "as-learned", static_cast<long long>(setup->options.train_len),
              static_cast<long long>(max_len), DeviceWords(setup->device).c_str(), Duration(Seconds(start)).c_str());
  std::printf("  acc      %.4f ± %.4f (%lld correct)\n", sum.acc, sum.acc_stderr, static_cast<long long>(sum.correct));
  std::printf("  acc_norm %.4f ± %.4f (%lld correct)\n", sum.acc_norm, sum.acc_norm_stderr, static_cast<long long>(sum.correct_norm));
  if (sum.truncated > 0) {
    std::printf("  context cut on the left to fit --seq_len=%lld: %lld of %lld items\n", static_cast<long long>(max_len),
                static_cast<long long>(sum.truncated), static_cast<long long>(sum.n));
  }
  std::printf("  results: %s, %s\n", summary_path.c_str(), items_path.c_str());
  return 0;
}

}  // namespace multiscreen::cli
