// What the `multiscreen eval` commands share (cli/eval_common.h).
#include "cli/eval_common.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <utility>

#include <zlib.h>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/device.h"
#include "cli/device_memory.h"
#include "cli/flags.h"
#include "cli/python_tool.h"
#include "cli/run_data.h"
#include "common/config.h"
#include "common/input_file.h"
#include "common/status.h"

ABSL_FLAG(uint64_t, generator_seed, 123, "eval abcdigits/passkey: random.Random seed of the generator (the author's: 123)");
ABSL_FLAG(bool, plot, false, "draw PNG figures with tools/plot_eval.py (python3-matplotlib)");
ABSL_FLAG(bool, resume, false, "continue the evaluation whose partial results are in --out");

namespace multiscreen::cli {

namespace fs = std::filesystem;
using json = nlohmann::json;

double Seconds(EvalClock::time_point since) { return std::chrono::duration<double>(EvalClock::now() - since).count(); }


std::string Duration(double s) {
  if (!std::isfinite(s)) return "?";
  if (s < 90) return absl::StrFormat("%.0fs", s);
  if (s < 5400) return absl::StrFormat("%.0fm", s / 60);
  return absl::StrFormat("%.1fh", s / 3600);
}

std::string GiB(int64_t bytes) { return absl::StrFormat("%.2f GiB", double(bytes) / (1 << 30)); }

json ReadJsonFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return json();
  return json::parse(in, nullptr, false);
}

absl::StatusOr<eval::RunnerDevice> DeviceFlags(const std::vector<std::string>& given) {
  const std::string device = absl::GetFlag(FLAGS_device), precision = absl::GetFlag(FLAGS_precision);
  return eval::ParseRunnerDevice(Given(given, "device") ? &device : nullptr,
                                 Given(given, "precision") ? &precision : nullptr, "eval");
}

std::string DeviceWords(const eval::RunnerDevice& d) {
  return absl::StrCat(DeviceName(d.device), ", ", eval::PrecisionName(d.precision));
}

absl::Status EvalSetup::UseScalingFor(int64_t eval_len) {
  auto f = eval::YarnFactorFor(yarn, eval_len, options.train_len);
  if (!f.ok()) return f.status();
  options.yarn_factor = *f;
  options.sigmoid_bias_length = eval::SigmoidBiasLengthFor(sigmoid_bias, eval_len);
  return absl::OkStatus();
}

namespace {

// CRC-32 (zlib's) of the parameters' bytes, as 8 hex digits.
std::string WeightsCrc32(const std::vector<float>& params) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* bytes = reinterpret_cast<const Bytef*>(params.data());
  size_t left = params.size() * sizeof(float);
  while (left > 0) {
    const uInt n = static_cast<uInt>(std::min<size_t>(left, size_t(1) << 30));
    crc = crc32(crc, bytes, n);
    bytes += n;
    left -= n;
  }
  return absl::StrFormat("%08x", static_cast<uint32_t>(crc));
}

// The fields of an identity that say how an input was named, each with the field that
// says what it held: the weights by their CRC-32, --data and choice's --task by their
// sampled fingerprints, where train_len came from (a path under the run directory) by
// train_len itself.
constexpr std::pair<const char*, const char*> kNamedBy[] = {{"weights", "weights_crc32"},
                                                            {"data", "data_fingerprint"},
                                                            {"task", "task_fingerprint"},
                                                            {"train_len_source", "train_len"}};

}  // namespace

absl::Status RefuseInputInsideOut(const char* flag, const std::string& path, const std::string& out) {
  std::error_code ec;
  if (path.empty() || out.empty() || !fs::exists(out, ec)) return absl::OkStatus();
  if (fs::equivalent(fs::absolute(path, ec).parent_path(), out, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", path, " lies in --out=", out,
                                                   ", where this evaluation writes its results: keep inputs outside it"));
  }
  return absl::OkStatus();
}

absl::Status RefuseEarlierResults(const std::vector<std::string>& names, const std::string& out) {
  if (absl::GetFlag(FLAGS_resume) || out.empty()) return absl::OkStatus();
  for (const std::string& name : names) {
    const std::string path = (fs::path(out) / name).string();
    if (std::error_code ec; fs::exists(path, ec)) {
      return absl::AlreadyExistsError(absl::StrCat("--out=", out, " already holds ", path,
                                                   ": --resume continues that evaluation (refused if it is another), "
                                                   "or give another --out"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<EvalSetup> Setup(const std::vector<std::string>& given, bool need_tokenizer,
                                bool multiscreen_only) {
  EvalSetup s;
  MS_RETURN_IF_ERROR(ApplyThreadsFlag());
  s.out = absl::GetFlag(FLAGS_out);
  if (s.out.empty()) return absl::InvalidArgumentError("--out=DIR is required (results are written there)");
  // Retention deletes a checkpoint directory whole: results written into one would go with it.
  MS_RETURN_IF_ERROR(CheckOutputPath("out", s.out, {}, /*out_is_directory=*/true));
  if (std::error_code ec; fs::exists(s.out, ec) && !fs::is_directory(s.out, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("--out=", s.out, ": is a file, not a directory (results are "
                                                   "written into a directory)"));
  }
  // The device is checked before the weights are read: no CUDA, or no GPU, is one line at once.
  auto device = DeviceFlags(given);
  if (!device.ok()) return device.status();
  s.device = *device;
  MS_RETURN_IF_ERROR(eval::CheckRunnerDevice(s.device));
  // The step of the checkpoint read (a live run may save newer ones meanwhile).
  auto weights = LoadWeights(absl::GetFlag(FLAGS_weights), absl::GetFlag(FLAGS_checkpoint), &s.checkpoint_step);
  if (!weights.ok()) return weights.status();
  s.weights = std::move(*weights);
  s.weights_crc32 = WeightsCrc32(s.weights.params);
  // The device's copy of the parameters, up front (what else does not fit there is
  // OnDeviceOutOfMemory's line, installed by EvalCommand).
  MS_RETURN_IF_ERROR(CheckDeviceMemory(s.device.device, 4 * int64_t(s.weights.params.size()),
                                       absl::StrCat("the parameters of ", s.weights.dims.name)));
  if (multiscreen_only && s.weights.dims.transformer()) {
    return absl::InvalidArgumentError(absl::StrCat("model ", s.weights.dims.name,
                                                   " is a Transformer: relevance maps are Multiscreen's (screening "
                                                   "tiles); a Transformer has none"));
  }
  const std::string run_dir = RunDirOf(absl::GetFlag(FLAGS_checkpoint));
  if (auto st = CheckWindowFlags(s.weights, absl::GetFlag(FLAGS_as_learned)); !st.ok()) return st;
  s.options.expand_windows = !absl::GetFlag(FLAGS_as_learned);
  s.options.train_len = RunTrainLen(given, run_dir, &s.train_len_source);
  if (s.options.train_len < 1) {  // only a --train_len given can be (a run's record is read only when >= 1)
    return absl::InvalidArgumentError(absl::StrCat("--train_len=", s.options.train_len, ": must be >= 1"));
  }
  auto yarn = eval::ParseYarnFactor(absl::GetFlag(FLAGS_yarn_factor), s.weights.dims);
  if (!yarn.ok()) return yarn.status();
  s.yarn = *yarn;
  s.options.yarn_factor = s.yarn.automatic ? 1.0 : s.yarn.factor;
  auto yarn_ramp = eval::ParseYarnRamp(absl::GetFlag(FLAGS_yarn_ramp), s.yarn);
  if (!yarn_ramp.ok()) return yarn_ramp.status();
  s.options.yarn_ramp = *yarn_ramp;
  auto sigmoid_bias = eval::ParseSigmoidBiasLength(absl::GetFlag(FLAGS_sigmoid_bias_length), s.weights.dims);
  if (!sigmoid_bias.ok()) return sigmoid_bias.status();
  s.sigmoid_bias = *sigmoid_bias;
  s.options.sigmoid_bias_length = s.sigmoid_bias.length;
  if (need_tokenizer) {
    auto tok = LoadRunTokenizer(given, run_dir);
    if (!tok.ok()) return tok.status();
    s.tokenizer = std::move(*tok);
    // Every evaluation that encodes text (ppl on text or JSONL, passkey, abcdigits,
    // relevance) would feed ids the model has no row for (embedded as zeros, scored as a
    // uniform guess): refused here, once, for all of them.
    if (s.tokenizer->vocab_size() > s.weights.dims.vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tokenizer: its ", s.tokenizer->vocab_size(), " tokens do not fit model ", s.weights.dims.name, "'s V = ",
          s.weights.dims.vocab, ": encoded text would hold ids past the model's vocabulary (give the tokenizer it was "
          "trained with, or token ids: --data=FILE.bin)"));
    }
  }
  MS_RETURN_IF_ERROR(CreateOutputDirectory("--out", s.out));
  return s;
}

json SetupJson(const EvalSetup& s) {
  json j = {{"model", s.weights.dims.name},
          {"weights", absl::GetFlag(FLAGS_weights).empty() ? absl::GetFlag(FLAGS_checkpoint) : absl::GetFlag(FLAGS_weights)},
          {"train_len", s.options.train_len},
          {"train_len_source", s.train_len_source},
          {"window_rule", s.options.expand_windows ? "expand" : "as_learned"},
          {"yarn_factor", s.options.yarn_factor},
          {"yarn_context_matched", s.yarn.automatic},
          {"device", DeviceName(s.device.device)},
          {"precision", eval::PrecisionName(s.device.precision)},
          {"weights_crc32", s.weights_crc32},
          {"checkpoint_step", s.checkpoint_step >= 0 ? json(s.checkpoint_step) : json(nullptr)}};
  // The tokenizer by content (an evaluation that encodes text): results resumed with
  // another vocabulary or merges would mix two encodings of the same text.
  if (s.tokenizer != nullptr) j["tokenizer_crc32c"] = s.tokenizer->content_crc32c();
  // YaRN's ramp when it is not the paper's (so that the identity of results written before
  // the flag holds).
  if (s.options.yarn_ramp != kernels::cpu::YarnRamp::kPaper) j["yarn_ramp"] = YarnRampName(s.options.yarn_ramp);
  // Sigmoid's bias (a model with attention SIGMOID and sigmoid_bias TRAIN_LENGTH only, so
  // that every other model's identity is what it was before the field).
  if (SigmoidBiasLength(s.weights.dims, &s.options, 0) > 0) {
    j["sigmoid_bias_length"] = SigmoidBiasLength(s.weights.dims, &s.options, 0);
    j["sigmoid_bias_context_matched"] = s.sigmoid_bias.automatic;
  }
  return j;
}

json WithDeviceDefaults(json identity) {
  if (identity.is_object() && !identity.contains("device")) {
    identity["device"] = "cpu";
    identity["precision"] = "fp32";
  }
  return identity;
}

std::string IdentityDifferences(const json& saved, const json& now) {
  if (!saved.is_object()) return "its identity is missing";
  std::vector<std::string> out;
  json all = saved;
  all.update(now);  // every key of either, in key order
  for (const auto& [path, content] : kNamedBy) {
    if (saved.contains(content) && now.contains(content) && saved[content] == now[content]) all.erase(path);
  }
  for (const auto& [key, unused] : all.items()) {
    const json there = saved.contains(key) ? saved[key] : json("(none)");
    const json here = now.contains(key) ? now[key] : json("(none)");
    if (there != here) out.push_back(absl::StrCat(key, " = ", there.dump(), " there, ", here.dump(), " here"));
  }
  return absl::StrJoin(out, "; ");
}

absl::Status Plot(const std::string& out, const std::string& kind) {
  auto script = PythonToolPath("plot_eval.py", "the plotter");
  if (!script.ok()) return absl::NotFoundError(absl::StrCat("--plot: ", script.status().message()));
  auto status = RunPythonTool(*script, {"--kind=" + kind, out});
  if (!status.ok()) return absl::InternalError(absl::StrCat("--plot: ", status.status().message()));
  if (*status != 0) {
    return absl::InternalError(absl::StrCat("--plot: ", *script, " --kind=", kind, " ", out, " failed (exit status ",
                                            *status, "; is python3-matplotlib installed?)"));
  }
  return absl::OkStatus();
}

}  // namespace multiscreen::cli
