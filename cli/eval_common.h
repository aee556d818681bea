// What the `multiscreen eval` commands share (cli/eval_command.cc dispatches to them, one
// file each: eval_ppl.cc, eval_abcdigits.cc, eval_passkey.cc, eval_ttft.cc,
// eval_relevance.cc, eval_choice.cc; the grid of abcdigits and passkey is eval_grid.h):
// reading the weights, the window rule, the tokenizer and the device into an EvalSetup;
// the identity a result records and a --resume compares; the refusals of inputs and
// earlier results in --out; progress words; the plots. The task logic lives in eval/.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/weights_source.h"
#include "data/gpt2_tokenizer.h"
#include "eval/model_runner.h"
#include "eval/sigmoid_bias.h"
#include "eval/yarn.h"
#include "nlohmann/json.hpp"

// Flags of several evaluations (defined in eval_common.cc).
ABSL_DECLARE_FLAG(bool, plot);             // ppl, abcdigits, passkey, relevance
ABSL_DECLARE_FLAG(bool, resume);           // ppl, abcdigits, passkey, choice
ABSL_DECLARE_FLAG(uint64_t, generator_seed);  // abcdigits, passkey, ttft
// Flags of other commands that the evaluations read.
ABSL_DECLARE_FLAG(std::string, checkpoint);
ABSL_DECLARE_FLAG(std::string, weights);
ABSL_DECLARE_FLAG(int64_t, train_len);
ABSL_DECLARE_FLAG(bool, as_learned);
ABSL_DECLARE_FLAG(int64_t, warmup);
ABSL_DECLARE_FLAG(std::string, device);
ABSL_DECLARE_FLAG(std::string, data);
ABSL_DECLARE_FLAG(std::string, format);
ABSL_DECLARE_FLAG(std::string, yarn_factor);
ABSL_DECLARE_FLAG(std::string, yarn_ramp);
ABSL_DECLARE_FLAG(std::string, sigmoid_bias_length);

namespace multiscreen::cli {

// The evaluations, each given the flags named on its command line (`given`, as
// GivenFlags). Each returns the exit code: 0, or 1 after a one-line error.
int EvalPpl(const std::vector<std::string>& given);
int EvalAbcDigits(const std::vector<std::string>& given);
int EvalPasskey(const std::vector<std::string>& given);
int EvalTtft(const std::vector<std::string>& given);
int EvalRelevance(const std::vector<std::string>& given);
int EvalChoice(const std::vector<std::string>& given);

using EvalClock = std::chrono::steady_clock;

// Seconds since `since`.
double Seconds(EvalClock::time_point since);

// "42s", "7m", "1.5h" (an ETA, a run's length); "?" when not finite.
std::string Duration(double s);

// "1.25 GiB".
std::string GiB(int64_t bytes);

// The JSON in `path`; a null json when it is missing, a discarded json when not JSON.
nlohmann::json ReadJsonFile(const std::string& path);

// --device and --precision of an evaluation (eval's defaults: cpu, fp32, whatever the
// global --device default of train and forward): where the model runs. Only parsed here;
// Setup checks that the device can run (CheckRunnerDevice).
absl::StatusOr<eval::RunnerDevice> DeviceFlags(const std::vector<std::string>& given);

// "cpu, fp32", "cuda, bf16": the device and precision as the summaries print them.
std::string DeviceWords(const eval::RunnerDevice& d);

// What every model-reading evaluation shares: the weights, the window rule, the tokenizer,
// the device.
struct EvalSetup {
  Weights weights;
  InferenceOptions options;
  eval::RunnerDevice device;  // --device, --precision (where the model runs)
  std::string train_len_source;  // where train_len came from, for the summary
  std::unique_ptr<Gpt2Tokenizer> tokenizer;
  std::string out;
  // Which weights the results are of: their CRC-32, and the checkpoint's step when they
  // came from one. A run directory names its latest checkpoint, which moves while the run
  // trains: a resume compares these, never the path (issue 31 §3).
  std::string weights_crc32;
  int64_t checkpoint_step = -1;
  // --yarn_factor (eval/yarn.h): options.yarn_factor holds a fixed F; with auto each
  // evaluation sets it from its own length (UseScalingFor). --sigmoid_bias_length
  // (eval/sigmoid_bias.h) likewise for options.sigmoid_bias_length.
  eval::YarnFlag yarn;
  eval::SigmoidBiasFlag sigmoid_bias;
  // Whether an evaluation's length changes its inference-time scaling (either flag's auto).
  bool scaling_follows_length() const { return yarn.automatic || sigmoid_bias.automatic; }
  // The inference-time scaling of an evaluation of eval_len tokens: options.yarn_factor and
  // options.sigmoid_bias_length. Errors: YarnFactorFor's (auto's factor above kMaxYarnFactor).
  absl::Status UseScalingFor(int64_t eval_len);
};

// Reads what EvalSetup holds from the flags: --out (required; not a file, not inside a
// checkpoint; created last), the device (checked before the weights are read), the
// weights (--weights or --checkpoint) and their CRC-32, the window flags, train_len, YaRN,
// and with need_tokenizer the tokenizer (refused when its vocabulary is larger than the
// model's). multiscreen_only: the evaluation reads Multiscreen's tiles (relevance), so a
// Transformer is refused in one line; every other evaluation runs either family.
absl::StatusOr<EvalSetup> Setup(const std::vector<std::string>& given, bool need_tokenizer,
                                bool multiscreen_only = false);

// The identity of an evaluation's results: model, weights (as named and by CRC-32, with
// the checkpoint step), train_len and its source, the window rule, YaRN, device,
// precision and the tokenizer by content (when one is loaded). Each evaluation adds its
// own fields (data, seq_len, ...).
nlohmann::json SetupJson(const EvalSetup& s);

// The identity of results written before eval recorded device and precision: those ran
// on the CPU in fp32, so a resume compares them as such.
nlohmann::json WithDeviceDefaults(nlohmann::json identity);

// What a --resume found (`saved`, WithDeviceDefaults applied) against this evaluation's
// identity: each field that differs, "seq_len = 16 there, 32 here", in key order joined
// by "; " (empty when they agree). Inputs are compared by content, not by how they were
// spelled (a field report: a resume from another working directory, --checkpoint=RUN
// there and --checkpoint=/abs/RUN here, was refused as "weights = ... there, ... here"):
// a path field (weights, data, task, train_len_source) counts only when its content field
// (weights_crc32, data_fingerprint, task_fingerprint, train_len) differs too, or is
// missing from either side (results from before eval recorded it).
std::string IdentityDifferences(const nlohmann::json& saved, const nlohmann::json& now);

// An input file (`flag`=`path`) inside --out, where the evaluation writes its results
// files, is refused (a field report: `eval ppl --data=DIR/ppl.csv --out=DIR` replaced its
// own input with its results): one line naming both.
absl::Status RefuseInputInsideOut(const char* flag, const std::string& path, const std::string& out);

// Without --resume, results of an earlier evaluation in --out (`names`, files under it) are
// refused rather than overwritten (a field report: `eval ppl --out=DIR` replaced DIR's
// ppl.json): "--out=DIR already holds DIR/ppl.json: --resume continues that evaluation
// (refused if it is another), or give another --out". Before the weights are read.
absl::Status RefuseEarlierResults(const std::vector<std::string>& names, const std::string& out);

// Runs tools/plot_eval.py --kind=`kind` on --out through RunPythonTool (cli/python_tool.h:
// Debian's /usr/bin/python3, which has python3-matplotlib; the path passed as it is, no
// shell). Errors: the script missing, or failing.
absl::Status Plot(const std::string& out, const std::string& kind);

}  // namespace multiscreen::cli
