// The (context, depth) grid of `eval abcdigits` and `eval passkey` (cli/eval_grid.h).
#include "cli/eval_grid.h"

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
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/device.h"
#include "cli/flags.h"
#include "common/decimal.h"
#include "common/status.h"
#include "common/text_file.h"
#include "eval/python_random.h"
#include "eval/task_dump.h"

ABSL_FLAG(std::string, contexts, "4096,8192,16384,32768,65536,131072", "eval abcdigits/passkey: context lengths");
ABSL_FLAG(std::string, depths, "0.1,0.3,0.5,0.7,0.9", "eval abcdigits/passkey: relative depths of the target");
ABSL_FLAG(int64_t, instances, 100, "eval abcdigits/passkey: instances per (context, depth) cell");
ABSL_FLAG(std::string, dump, "", "eval abcdigits/passkey: JSONL of the instances (and the model's outputs)");

namespace multiscreen::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = EvalClock;

// ---- abcdigits, passkey: the (context, depth) grid --------------------------------------

// A value of a grid flag's list given twice (each would be a cell of its own): refused,
// naming the flag and the value.
template <typename T>
absl::Status RefuseRepeats(const std::string& flag, const std::string& text, std::vector<T> values) {
  std::sort(values.begin(), values.end());
  if (auto dup = std::adjacent_find(values.begin(), values.end()); dup != values.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", text, ": ", *dup, " is given twice (each would be a cell of its own)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> ParseInts(const std::string& flag, const std::string& text) {
  std::vector<int64_t> out;
  MS_ASSIGN_OR_RETURN(const std::vector<std::string> parts, SplitListFlag(flag, text));
  for (const std::string& part : parts) {
    int64_t v;
    if (!IsDecimalInteger(part) || !absl::SimpleAtoi(part, &v) || v < 1) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", text, ": '", part, "' is not a positive integer"));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  MS_RETURN_IF_ERROR(RefuseRepeats(flag, text, out));
  return out;
}

absl::StatusOr<std::vector<double>> ParseDepths(const std::string& text) {
  std::vector<double> out;
  MS_ASSIGN_OR_RETURN(const std::vector<std::string> parts, SplitListFlag("depths", text));
  for (const std::string& part : parts) {
    double v;
    if (!ParseDecimal(part, &v) || !(v >= 0 && v <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat("--depths=", text, ": '", part, "' is not a number in [0, 1]"));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError("--depths is empty");
  MS_RETURN_IF_ERROR(RefuseRepeats("depths", text, out));
  return out;
}

}  // namespace

absl::Status CheckDumpPath(const std::string& dump, const std::string& out, const std::string& task) {
  MS_RETURN_IF_ERROR(CheckOutputFile("dump", dump, {absl::GetFlag(FLAGS_weights)}));
  std::error_code ec;
  for (const char* ext : {".json", ".csv"}) {
    const fs::path results = fs::path(out) / (task + ext);
    if (!out.empty() && fs::weakly_canonical(results, ec) == fs::weakly_canonical(dump, ec)) {
      return absl::InvalidArgumentError(absl::StrCat("--dump=", dump, " is the results file ", results.string(),
                                                     " of this evaluation: choose another path"));
    }
  }
  return absl::OkStatus();
}

// Without --resume, results of an earlier evaluation in --out are refused rather than
// overwritten (a field report: `eval ppl --out=DIR` replaced DIR's ppl.json): "--out=DIR

int RunGrid(const GridTask& task, EvalSetup& setup) {
  const std::string cmd = absl::StrCat("eval ", task.name);
  auto contexts = ParseInts("contexts", absl::GetFlag(FLAGS_contexts));
  if (!contexts.ok()) return Fail(cmd.c_str(), contexts.status());
  auto depths = ParseDepths(absl::GetFlag(FLAGS_depths));
  if (!depths.ok()) return Fail(cmd.c_str(), depths.status());
  const int64_t K = absl::GetFlag(FLAGS_instances);
  if (K < 1) return Fail(cmd.c_str(), absl::InvalidArgumentError(absl::StrCat("--instances=", K, ": must be >= 1")));
  // The instances are continued with the decoding cache on the runner's device
  // (eval::ModelRunner::Greedy), on the CPU in fp32 only.
  const bool on_device = setup.device.device != Device::kCpu;
  if (!on_device && setup.device.precision != Precision::kFp32) {
    return Fail(cmd.c_str(), absl::InvalidArgumentError(absl::StrCat(
                                 "--precision=", eval::PrecisionName(setup.device.precision),
                                 ": on the CPU the grid decodes with the decoding cache, in fp32; bf16 runs with "
                                 "--device=cuda (the device's decoding cache)")));
  }
  auto runner = std::make_unique<eval::ModelRunner>(setup.weights, setup.options, setup.device);
  const int64_t avail = eval::AvailableMemoryBytes(), device_free = on_device ? eval::DeviceFreeBytes() : 0;
  for (int64_t c : *contexts) {
    // One instance's text, ids and the generator's line indices (about 32 bytes per token:
    // text, ids, the tokenizer's pieces) in host memory, and the decoding cache on the CPU
    // or on the device.
    const int64_t tokens = c * task.tokens_per_unit + task.max_new + 64;
    const int64_t host_need = (on_device ? 0 : runner->DecodeBytes(tokens)) + 32 * tokens;
    const char* unit = task.tokens_per_unit > 1 ? " lines" : " tokens";
    if (avail > 0 && host_need > avail) {
      return Fail(cmd.c_str(), absl::ResourceExhaustedError(absl::StrCat("--contexts: ", c, unit, " need about ", GiB(host_need),
                                                                         on_device ? " (the prompt), " : " (the decoding cache and the prompt), ",
                                                                         GiB(avail), " available")));
    }
    const int64_t device_need = on_device ? runner->DecodeBytes(tokens) : 0;
    if (device_free > 0 && device_need > device_free) {
      return Fail(cmd.c_str(), absl::ResourceExhaustedError(absl::StrCat("--contexts: ", c, unit, " need about ", GiB(device_need),
                                                                         " (the decoding cache on ", DeviceName(setup.device.device), "), ",
                                                                         GiB(device_free), " free on the device")));
    }
  }
  // A context the generator cannot fill (too short) is refused before any cell runs, named
  // as --contexts (the generator's own messages say --length, --generate_only's flag).
  for (int64_t c : *contexts) {
    if (auto one = task.make(c, depths->front(), 1); !one.ok()) {
      std::string why(one.status().message());
      if (absl::StartsWith(why, "--length=")) why = why.substr(why.find(':') + 2);
      return Fail(cmd.c_str(), absl::InvalidArgumentError(absl::StrCat("--contexts: ", c, ": ", why)));
    }
  }
  const std::string results_path = absl::StrCat(setup.out, "/", task.name, ".json");
  json identity = SetupJson(setup);
  identity["mode"] = task.mode;
  identity["instances"] = K;
  identity["generator_seed"] = absl::GetFlag(FLAGS_generator_seed);
  json cells = json::array();
  if (absl::GetFlag(FLAGS_resume)) {
    const json old = ReadJsonFile(results_path);
    if (!old.is_object()) return Fail(cmd.c_str(), absl::NotFoundError(absl::StrCat("--resume: ", results_path, " is missing or not JSON")));
    const json saved = WithDeviceDefaults(old.value("identity", json()));
    if (const std::string differs = IdentityDifferences(saved, identity); !differs.empty()) {
      return Fail(cmd.c_str(), absl::FailedPreconditionError(
                                   absl::StrCat("--resume: ", results_path, " is of another evaluation: ", differs)));
    }
    cells = old["cells"];
  }
  auto done = [&](int64_t c, double d) {
    for (const json& cell : cells) {
      if (cell["context"] == c && std::abs(cell["depth"].get<double>() - d) < 1e-12) return true;
    }
    return false;
  };
  std::ofstream dump;
  if (!absl::GetFlag(FLAGS_dump).empty()) {
    if (auto s = CheckDumpPath(absl::GetFlag(FLAGS_dump), setup.out, task.name); !s.ok()) return Fail(cmd.c_str(), s);
    dump.open(absl::GetFlag(FLAGS_dump), absl::GetFlag(FLAGS_resume) ? std::ios::app : std::ios::trunc);
    if (!dump) return Fail(cmd.c_str(), absl::InvalidArgumentError(absl::StrCat("--dump=", absl::GetFlag(FLAGS_dump), ": cannot write")));
  }
  const int64_t total = static_cast<int64_t>(contexts->size() * depths->size());
  int64_t finished = 0, ran = 0;
  double work_done = 0, work_left = 0;  // in context-tokens, for the ETA
  for (int64_t c : *contexts) {
    for (double d : *depths) work_left += done(c, d) ? 0 : double(c);
  }
  const auto start = Clock::now();
  for (int64_t c : *contexts) {
    for (double d : *depths) {
      ++finished;
      if (done(c, d)) continue;
      auto instances = task.make(c, d, K);
      if (!instances.ok()) return Fail(cmd.c_str(), instances.status());
      if (setup.scaling_follows_length()) {  // context-matched: this cell's prompt and answer (over train_len)
        auto first = setup.tokenizer->Encode(instances->front().prompt);
        if (!first.ok()) return Fail(cmd.c_str(), first.status());
        if (auto s = setup.UseScalingFor(static_cast<int64_t>(first->size()) + task.max_new); !s.ok()) {
          return Fail(cmd.c_str(), s);
        }
        runner = std::make_unique<eval::ModelRunner>(setup.weights, setup.options, setup.device);
      }
      const auto t0 = Clock::now();
      int64_t correct = 0, prompt_tokens = 0;
      for (const TaskInstance& inst : *instances) {
        auto ids = setup.tokenizer->Encode(inst.prompt);
        if (!ids.ok()) return Fail(cmd.c_str(), ids.status());
        prompt_tokens += ids->size();
        const std::vector<int32_t> gen = runner->Greedy(*ids, task.max_new);
        auto text = setup.tokenizer->Decode(gen);
        if (!text.ok()) return Fail(cmd.c_str(), text.status());
        const bool ok = task.score(*text, inst.answer);
        correct += ok;
        if (dump.is_open()) {
          std::string line = eval::TaskLine(inst.prompt, inst.answer);
          line.pop_back();  // "}\n" → add the model's fields
          line.pop_back();
          dump << line << ", \"output\": " << eval::PythonJsonString(task.shown(*text)) << ", \"correct\": " << (ok ? "true" : "false")
               << ", \"context\": " << c << ", \"depth\": " << d << "}\n";
        }
      }
      if (dump.is_open()) dump.flush();
      const double secs = Seconds(t0);
      cells.push_back({{"context", c}, {"depth", d}, {"instances", K}, {"correct", correct},
                       {"accuracy", double(correct) / K}, {"mean_prompt_tokens", double(prompt_tokens) / K}, {"seconds", secs},
                       {"yarn_factor", setup.options.yarn_factor}});
      json results = {{"identity", identity}, {"cells", cells}};
      if (auto s = WriteTextFile(results_path, results.dump(1)); !s.ok()) return Fail(cmd.c_str(), s);
      std::string csv = "context,depth,instances,correct,accuracy\n";
      for (const json& cell : cells) {
        csv += absl::StrFormat("%d,%g,%d,%d,%.4f\n", cell["context"].get<int64_t>(), cell["depth"].get<double>(),
                               cell["instances"].get<int64_t>(), cell["correct"].get<int64_t>(), cell["accuracy"].get<double>());
      }
      if (auto s = WriteTextFile(absl::StrCat(setup.out, "/", task.name, ".csv"), csv); !s.ok()) return Fail(cmd.c_str(), s);
      ++ran;
      work_done += c;
      const double eta = Seconds(start) / work_done * (work_left - work_done);
      std::fprintf(stderr, "%s: cell %lld/%lld (context %lld, depth %g): accuracy %.3f (%lld/%lld) in %s, ETA %s\n", cmd.c_str(),
                   static_cast<long long>(finished), static_cast<long long>(total), static_cast<long long>(c), d,
                   double(correct) / K, static_cast<long long>(correct), static_cast<long long>(K), Duration(secs).c_str(),
                   Duration(eta).c_str());
    }
  }
  // Summary: the accuracy table, contexts down, depths across.
  std::printf("%s: accuracy per (context, depth), %lld instances per cell; train_len %lld (%s), %s windows; greedy with "
              "the decoding cache (%s)\n",
              cmd.c_str(), static_cast<long long>(K), static_cast<long long>(setup.options.train_len),
              setup.train_len_source.c_str(), setup.options.expand_windows ? "expanded" : "as-learned",
              DeviceWords(setup.device).c_str());
  std::printf("%10s", "context");
  for (double d : *depths) std::printf(" %6g", d);
  std::printf("\n");
  for (int64_t c : *contexts) {
    std::printf("%10lld", static_cast<long long>(c));
    for (double d : *depths) {
      for (const json& cell : cells) {
        if (cell["context"] == c && std::abs(cell["depth"].get<double>() - d) < 1e-12) std::printf(" %6.3f", cell["accuracy"].get<double>());
      }
    }
    std::printf("\n");
  }
  std::printf("  results: %s, %s/%s.csv\n", results_path.c_str(), setup.out.c_str(), task.name);
  if (absl::GetFlag(FLAGS_plot)) {
    if (auto s = Plot(setup.out, task.name); !s.ok()) return Fail(cmd.c_str(), s);
  }
  return 0;
}

std::function<int64_t(const std::string&)> TokenCounter(const Gpt2Tokenizer& tok) {
  return [&tok](const std::string& text) {
    auto ids = tok.Encode(text);
    return ids.ok() ? static_cast<int64_t>(ids->size()) : int64_t{0};
  };
}

}  // namespace multiscreen::cli
