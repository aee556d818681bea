// `multiscreen eval choice`: zero-shot multiple choice (eval/choice.h: HellaSwag, PIQA,
// ARC, WinoGrande as lm-evaluation-harness scores them) with the full forward of the
// runner's device; --out/choice_STEM.json (the summary) and choice_STEM.jsonl (per item,
// appended as each item is scored). --resume continues a run from the items in
// choice_STEM.jsonl once its identity (the weights by content, the task file by the
// CRC-32C of all its bytes, wherever it now lies; the tokenizer by content; format, seq_len, the window rule, the device) agrees; without --resume
// results there are refused, as every resumable evaluation refuses them (eval_common.h).
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
#include "common/crc32c.h"
#include "common/input_file.h"
#include "common/text_file.h"
#include "data/byte_source.h"
#include "eval/choice.h"

ABSL_FLAG(std::string, task, "", "eval choice: the benchmark's JSONL file (one item per line)");

namespace multiscreen::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = EvalClock;

// JSON text of our results; bytes that are not UTF-8 (a --task path may hold them) become
// U+FFFD instead of nlohmann's type_error.316 exception.
std::string Dump(const json& j, int indent = -1) { return j.dump(indent, ' ', false, json::error_handler_t::replace); }

// The base name the results are named by: "hellaswag" for hellaswag.jsonl, .jsonl.gz and
// .jsonl.zst alike.
std::string ChoiceStem(const std::string& task) { return fs::path(WithoutCompressionSuffix(task)).stem().string(); }

// CRC-32C (8 hex digits) of the task file's size and of every one of its bytes as stored
// (compressed, for .gz/.zst): what --resume compares. Every byte, unlike the sampled
// fingerprint of eval ppl's text (which may be many GiB): an item edited in place keeps
// the size, and a 10 MB task is read whole anyway. Errors name the file.
absl::StatusOr<std::string> TaskFingerprint(const std::string& task) {
  auto bytes = ReadRegularFile(task, "task file", std::numeric_limits<int64_t>::max());
  if (!bytes.ok()) return bytes.status();
  Crc32cStream crc;
  const uint64_t size = bytes->size();
  crc.Update(&size, sizeof(size));
  crc.Update(bytes->data(), bytes->size());
  return crc.hex();
}

// One item's row of choice_STEM.jsonl.
json ItemRow(size_t i, const eval::ChoiceItem& item, const eval::ChoiceScore& score) {
  return {{"index", i},           {"line", item.line},
          {"loglik", score.loglik}, {"tokens", score.tokens},
          {"chars", score.chars},   {"pred", score.pred},
          {"pred_norm", score.pred_norm}, {"gold", item.gold},
          {"correct", score.pred == item.gold}, {"correct_norm", score.pred_norm == item.gold},
          {"truncated", score.truncated}};
}

// The scores in the rows of choice_STEM.jsonl (`path`) that an earlier run of the same
// evaluation wrote, checked against `items`: row i is item i's (its index and task line),
// with K log-likelihoods, token and character counts for its K choices. A last line
// without its '\n' (the run was stopped while writing it) is cut from the file. Errors
// name the file and line.
absl::StatusOr<std::vector<eval::ChoiceScore>> ReadScoredRows(const std::string& path,
                                                             const std::vector<eval::ChoiceItem>& items) {
  std::vector<eval::ChoiceScore> scores;
  std::error_code ec;
  if (!fs::exists(path, ec)) return scores;  // stopped before the first item was scored
  std::ifstream in(path, std::ios::binary);
  std::stringstream buf;
  buf << in.rdbuf();
  if (!in) return absl::DataLossError(absl::StrCat("--resume: ", path, ": cannot be read"));
  const std::string text = buf.str();
  const size_t complete = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
  if (complete < text.size()) {
    fs::resize_file(path, complete, ec);
    if (ec) return absl::DataLossError(absl::StrCat("--resume: ", path, ": cannot cut its unfinished last line: ", ec.message()));
  }
  size_t at = 0;
  for (int64_t n = 1; at < complete; ++n) {
    const size_t nl = text.find('\n', at);
    const json row = json::parse(std::string_view(text).substr(at, nl - at), nullptr, false);
    at = nl + 1;
    const size_t i = scores.size();
    auto bad = [&](const std::string& why) {
      return absl::DataLossError(absl::StrCat("--resume: ", path, ":", n, ": ", why,
                                              "; rerun without --resume into a new --out"));
    };
    if (i >= items.size()) return bad(absl::StrCat("more rows than the task's ", items.size(), " items"));
    const eval::ChoiceItem& item = items[i];
    const size_t K = item.choices.size();
    auto ints = [&](const char* field, std::vector<int64_t>* out) {
      if (!row.contains(field) || !row[field].is_array() || row[field].size() != K) return false;
      for (const json& v : row[field]) {
        if (!v.is_number_integer()) return false;
        out->push_back(v.get<int64_t>());
      }
      return true;
    };
    auto index = [&](const char* field) -> int64_t {
      return row.contains(field) && row[field].is_number_integer() ? row[field].get<int64_t>() : -2;
    };
    if (!row.is_object()) return bad("not a JSON object");
    if (index("index") != static_cast<int64_t>(i) || index("line") != item.line) {
      return bad(absl::StrCat("expected item ", i, " of task line ", item.line, " (is the task file another?)"));
    }
    eval::ChoiceScore score;
    if (!row.contains("loglik") || !row["loglik"].is_array() || row["loglik"].size() != K) {
      return bad(absl::StrCat("\"loglik\": expected ", K, " numbers"));
    }
    for (const json& v : row["loglik"]) {
      if (!v.is_number()) return bad(absl::StrCat("\"loglik\": expected ", K, " numbers"));
      score.loglik.push_back(v.get<double>());
    }
    if (!ints("tokens", &score.tokens) || !ints("chars", &score.chars)) {
      return bad(absl::StrCat("\"tokens\" and \"chars\": expected ", K, " integers each"));
    }
    score.pred = index("pred");
    score.pred_norm = index("pred_norm");
    if (score.pred < 0 || score.pred >= static_cast<int64_t>(K) || score.pred_norm < 0 ||
        score.pred_norm >= static_cast<int64_t>(K) || !row.contains("truncated") || !row["truncated"].is_boolean()) {
      return bad(absl::StrCat("\"pred\", \"pred_norm\": expected choices in [0, ", K, "), \"truncated\" a boolean"));
    }
    score.truncated = row["truncated"].get<bool>();
    scores.push_back(std::move(score));
  }
  return scores;
}

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
  // Outputs are named by the task file's base name: a summary of another task of the same
  // name in --out is refused (with or without --resume); one of this task needs --resume.
  const std::string stem = ChoiceStem(task), out_flag = absl::GetFlag(FLAGS_out);
  const std::string summary_name = absl::StrCat("choice_", stem, ".json"), items_name = absl::StrCat("choice_", stem, ".jsonl");
  std::error_code ec;
  const std::string task_abs = fs::weakly_canonical(fs::absolute(task), ec).string();
  // The task by its content, read before anything is written: a moved or renamed copy of
  // the same task is the same task (its path is not compared then).
  auto fingerprint = TaskFingerprint(task);
  if (!fingerprint.ok()) return Fail("eval choice", fingerprint.status());
  if (!out_flag.empty()) {
    const std::string summary_path = (fs::path(out_flag) / summary_name).string();
    if (const json old = ReadJsonFile(summary_path); old.is_object()) {
      const json named = old.contains("task_path") ? old["task_path"] : old.contains("task") ? old["task"] : json("");
      const std::string old_task = named.is_string() ? named.get<std::string>() : named.dump();
      const bool same_content = old.contains("identity") && old["identity"].is_object() &&
                                old["identity"].value("task_fingerprint", json()) == json(*fingerprint);
      if (old_task != task_abs && old_task != task && !same_content) {
        return Fail("eval choice", absl::AlreadyExistsError(absl::StrCat(
                                       "--out=", out_flag, " already holds ", summary_path, " of --task=", old_task,
                                       ", not of --task=", task, " (same base name): give another --out")));
      }
    }
    if (auto s = RefuseEarlierResults({summary_name, items_name}, out_flag); !s.ok()) return Fail("eval choice", s);
  }
  auto items = eval::ReadChoiceFile(task, *format);
  if (!items.ok()) return Fail("eval choice", items.status());
  auto setup = Setup(given, true);
  if (!setup.ok()) return Fail("eval choice", setup.status());
  // The window of one scored sequence: --seq_len, else the training length (lm-eval's
  // max_length is the model's trained context).
  const int64_t max_len = absl::GetFlag(FLAGS_seq_len) > 0 ? absl::GetFlag(FLAGS_seq_len) : setup->options.train_len;
  if (auto s = setup->UseScalingFor(max_len); !s.ok()) return Fail("eval choice", s);
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
  const std::string items_path = (fs::path(setup->out) / items_name).string();
  const std::string summary_path = (fs::path(setup->out) / summary_name).string();
  // What a --resume must find the same: the weights (by content), the task file (by its
  // fingerprint), how it is read and scored, the window rule and the device.
  json identity = SetupJson(*setup);
  identity.update({{"task", task}, {"task_fingerprint", *fingerprint}, {"format", eval::ChoiceFormatName(*format)},
                   {"seq_len", max_len}});
  std::vector<eval::ChoiceScore> scores;
  double seconds_before = 0;  // of the runs resumed
  if (absl::GetFlag(FLAGS_resume)) {
    const json old = ReadJsonFile(summary_path);
    if (!old.is_object()) {
      return Fail("eval choice", absl::NotFoundError(absl::StrCat("--resume: ", summary_path, " is missing or not JSON")));
    }
    const json saved = WithDeviceDefaults(old.contains("identity") ? old["identity"] : json());
    if (const std::string differs = IdentityDifferences(saved, identity); !differs.empty()) {
      return Fail("eval choice", absl::FailedPreconditionError(
                                     absl::StrCat("--resume: ", summary_path, " is of another evaluation: ", differs)));
    }
    auto rows = ReadScoredRows(items_path, *items);
    if (!rows.ok()) return Fail("eval choice", rows.status());
    scores = std::move(*rows);
    if (old.contains("seconds") && old["seconds"].is_number()) seconds_before = old["seconds"].get<double>();
    std::fprintf(stderr, "eval choice: resuming after %zu of %zu items\n", scores.size(), items->size());
  }
  const auto start = Clock::now();
  // The summary of the items scored so far; `complete` once all are.
  auto write_summary = [&](bool complete) {
    const eval::ChoiceSummary sum = eval::SummarizeChoices(*items, scores);
    auto number = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
    json result = SetupJson(*setup);
    result.update({{"task", task}, {"format", eval::ChoiceFormatName(*format)}, {"seq_len", max_len}, {"n", sum.n},
                   {"items_total", items->size()}, {"complete", complete},
                   {"acc", number(sum.acc)}, {"acc_stderr", number(sum.acc_stderr)}, {"acc_norm", number(sum.acc_norm)},
                   {"acc_norm_stderr", number(sum.acc_norm_stderr)}, {"correct", sum.correct},
                   {"correct_norm", sum.correct_norm}, {"truncated", sum.truncated},
                   {"seconds", seconds_before + Seconds(start)}, {"items", items_path}, {"task_path", task_abs},
                   {"identity", identity}});
    return WriteTextFile(summary_path, Dump(result, 1));
  };
  // Once this run's first item is scored (a run refused by its first item leaves nothing
  // to resume), the summary with the identity, so that a run stopped at any later point
  // can be resumed; then each item's row is appended (and flushed) as it is scored.
  std::ofstream rows;
  auto last_report = start;
  const size_t first = scores.size();
  for (size_t i = first; i < items->size(); ++i) {
    const eval::ChoiceItem& item = (*items)[i];
    auto score = eval::ScoreChoiceItem(item, absl::StrCat(task, ":", item.line), *setup->tokenizer, eos, max_len, losses);
    if (!score.ok()) return Fail("eval choice", score.status());
    if (i == first) {
      if (auto s = write_summary(false); !s.ok()) return Fail("eval choice", s);
      rows.open(items_path, std::ios::binary | (absl::GetFlag(FLAGS_resume) ? std::ios::app : std::ios::trunc));
      if (!rows) return Fail("eval choice", absl::PermissionDeniedError(absl::StrCat(items_path, ": cannot be written")));
    }
    rows << Dump(ItemRow(i, item, *score)) << '\n';
    rows.flush();
    if (!rows) return Fail("eval choice", absl::DataLossError(absl::StrCat(items_path, ": write failed")));
    scores.push_back(std::move(*score));
    if (Seconds(last_report) > 10) {
      last_report = Clock::now();
      if (auto s = write_summary(false); !s.ok()) return Fail("eval choice", s);
      const double rate = (i + 1 - first) / Seconds(start);
      std::fprintf(stderr, "eval choice: %zu/%zu items, %.1f items/s, ETA %s\n", i + 1, items->size(), rate,
                   Duration((items->size() - i - 1) / rate).c_str());
    }
  }
  rows.close();
  if (auto s = write_summary(true); !s.ok()) return Fail("eval choice", s);
  const eval::ChoiceSummary sum = eval::SummarizeChoices(*items, scores);
  std::printf("eval choice: %s, %lld items of %s (%s format), %s windows (train_len %lld), seq_len %lld, %s, %s\n",
              setup->weights.dims.name.c_str(), static_cast<long long>(sum.n), OneLine(task).c_str(),
              eval::ChoiceFormatName(*format), setup->options.expand_windows ? "expanded" : "as-learned",
              static_cast<long long>(setup->options.train_len), static_cast<long long>(max_len),
              DeviceWords(setup->device).c_str(), Duration(Seconds(start)).c_str());
  std::printf("  acc      %.4f ± %.4f (%lld correct)\n", sum.acc, sum.acc_stderr, static_cast<long long>(sum.correct));
  std::printf("  acc_norm %.4f ± %.4f (%lld correct)\n", sum.acc_norm, sum.acc_norm_stderr, static_cast<long long>(sum.correct_norm));
  if (sum.truncated > 0) {
    std::printf("  context cut on the left to fit --seq_len=%lld: %lld of %lld items\n", static_cast<long long>(max_len),
                static_cast<long long>(sum.truncated), static_cast<long long>(sum.n));
  }
  std::printf("  results: %s, %s\n", OneLine(summary_path).c_str(), OneLine(items_path).c_str());
  return 0;
}

}  // namespace multiscreen::cli
