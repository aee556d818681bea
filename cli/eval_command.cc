// `multiscreen eval ppl|abcdigits|passkey|ttft|relevance|choice …`: the paper's evaluations of a trained
// model (spec "Evaluations", issue 16). Each reads --checkpoint=DIR or --weights=FILE.h5,
// applies the inference window rule (expansion past --train_len; --as_learned keeps every
// w), writes JSON (and CSV where a table fits) into --out, prints a summary, and with
// --plot draws PNGs through tools/plot_eval.py (which re-runs on the results alone).
// Grid evaluations write results as each cell finishes; --resume skips the cells (and ppl
// the windows) already in --out, and without it results there are refused, not
// overwritten. Single-process: refused under a launcher of several.
// --device=cpu|cuda and --precision=fp32|bf16 (default cpu, fp32) place the model
// (eval::ModelRunner): the full forward and the decoding cache; on the CPU the decoding
// cache runs in fp32 only.
#include <algorithm>
#include <limits>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <unistd.h>
#include <zlib.h>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "checkpoint/checkpoint.h"
#include "cli/commands.h"
#include "cli/device.h"
#include "cli/device_memory.h"
#include "cli/flags.h"
#include "cli/run_data.h"
#include "cli/weights_source.h"
#include "common/config.h"
#include "common/decimal.h"
#include "common/input_file.h"
#include "common/status.h"
#include "common/text_file.h"
#include "data/gpt2_tokenizer.h"
#include "data/loader.h"
#include "data/megatron_index.h"
#include "data/token_file.h"
#include "eval/abcdigits.h"
#include "eval/choice.h"
#include "eval/model_runner.h"
#include "eval/passkey.h"
#include "eval/position_loss.h"
#include "eval/python_random.h"
#include "eval/relevance.h"
#include "eval/task_dump.h"
#include "eval/yarn.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(int64_t, documents, 0, "eval ppl: at most this many windows (0: all)");
ABSL_FLAG(int64_t, stride, 0, "eval ppl: take a window every STRIDE tokens of a document (0: one per document; --stream: N+1)");
ABSL_FLAG(bool, stream, false, "eval ppl: read the input as one token stream (as training does) instead of splitting at EOS");
ABSL_FLAG(std::string, method, "auto", "eval ppl: full (one forward per window) | decode (the decoding cache) | auto");
ABSL_FLAG(std::string, contexts, "4096,8192,16384,32768,65536,131072", "eval abcdigits/passkey: context lengths");
ABSL_FLAG(std::string, depths, "0.1,0.3,0.5,0.7,0.9", "eval abcdigits/passkey: relative depths of the target");
ABSL_FLAG(int64_t, instances, 100, "eval abcdigits/passkey: instances per (context, depth) cell");
ABSL_FLAG(bool, generate_only, false, "eval abcdigits: write the instances of one cell to --dump, no model");
ABSL_FLAG(std::string, mode, "tokens", "eval abcdigits: length in lines | tokens (GPT-2)");
ABSL_FLAG(int64_t, length, 0, "eval abcdigits --generate_only: lines or tokens of the cell");
ABSL_FLAG(double, depth, 0.5, "eval abcdigits --generate_only: depth of the cell");
ABSL_FLAG(std::string, dump, "", "eval abcdigits/passkey: JSONL of the instances (and the model's outputs)");
ABSL_FLAG(uint64_t, generator_seed, 123, "eval abcdigits/passkey: random.Random seed of the generator (the author's: 123)");
ABSL_FLAG(int64_t, context, 4096, "eval ttft: prompt tokens");
ABSL_FLAG(int64_t, repeats, 5, "eval ttft: timed prefills");
ABSL_FLAG(std::string, text, "", "eval relevance: a UTF-8 text file to inspect");
ABSL_FLAG(std::string, layers, "", "eval relevance: layers whose maps are written (comma-separated; empty: all)");
ABSL_FLAG(std::string, map_tiles, "", "eval relevance: tiles of those layers whose maps are written (empty: all)");
ABSL_FLAG(std::string, task, "", "eval choice: the benchmark's JSONL file (one item per line)");
ABSL_FLAG(bool, plot, false, "draw PNG figures with tools/plot_eval.py (python3-matplotlib)");
ABSL_FLAG(bool, resume, false, "continue the evaluation whose partial results are in --out");

ABSL_DECLARE_FLAG(std::string, checkpoint);
ABSL_DECLARE_FLAG(std::string, weights);
ABSL_DECLARE_FLAG(int64_t, train_len);
ABSL_DECLARE_FLAG(bool, as_learned);
ABSL_DECLARE_FLAG(int64_t, warmup);
ABSL_DECLARE_FLAG(std::string, device);
ABSL_DECLARE_FLAG(std::string, data);
ABSL_DECLARE_FLAG(std::string, format);
ABSL_DECLARE_FLAG(std::string, yarn_factor);

namespace multiscreen::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

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

// --device and --precision of an evaluation (eval's defaults: cpu, fp32, whatever the
// global --device default of train and forward): where the model runs. Only parsed here;
// Setup checks that the device can run (CheckRunnerDevice).
absl::StatusOr<eval::RunnerDevice> DeviceFlags(const std::vector<std::string>& given) {
  const std::string device = absl::GetFlag(FLAGS_device), precision = absl::GetFlag(FLAGS_precision);
  return eval::ParseRunnerDevice(Given(given, "device") ? &device : nullptr,
                                 Given(given, "precision") ? &precision : nullptr, "eval");
}

// "cpu, fp32", "cuda, bf16": the device and precision as the summaries print them.
std::string DeviceWords(const eval::RunnerDevice& d) {
  return absl::StrCat(DeviceName(d.device), ", ", eval::PrecisionName(d.precision));
}

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
  // evaluation sets it from its own length (UseYarnFor).
  eval::YarnFlag yarn;
  // Sets options.yarn_factor for an evaluation of eval_len tokens. Errors: YarnFactorFor's
  // (auto's factor above kMaxYarnFactor).
  absl::Status UseYarnFor(int64_t eval_len) {
    auto f = eval::YarnFactorFor(yarn, eval_len, options.train_len);
    if (!f.ok()) return f.status();
    options.yarn_factor = *f;
    return absl::OkStatus();
  }
};

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

// What shrinks evaluation `sub`'s memory on a device (cli/device_memory.h's lines).
std::string DeviceMemoryAdvice(const std::string& sub) {
  const char* flag = sub == "ppl" || sub == "choice"           ? "a shorter --seq_len, "
                     : sub == "abcdigits" || sub == "passkey" ? "smaller --contexts, "
                     : sub == "ttft"                           ? "a shorter --context, "
                                                               : "";
  return absl::StrCat(flag, "a smaller model, or --device=cpu");
}

// The files evaluation `sub` keeps its results in, under --out, which --resume continues:
// ppl's (ppl.json, and ppl_state.json, its windows so far) and the grids' (<task>.json);
// none for the others (abcdigits --generate_only writes only its --dump).
std::vector<std::string> ResumableResults(const std::string& sub) {
  if (sub == "ppl") return {"ppl.json", "ppl_state.json"};
  if ((sub == "abcdigits" && !absl::GetFlag(FLAGS_generate_only)) || sub == "passkey") return {sub + ".json"};
  return {};
}

// An input file (`flag`=`path`) inside --out, where the evaluation writes its results
// files, is refused (a field report: `eval ppl --data=DIR/ppl.csv --out=DIR` replaced its
// own input with its results): one line naming both.
absl::Status RefuseInputInsideOut(const char* flag, const std::string& path, const std::string& out) {
  std::error_code ec;
  if (path.empty() || out.empty() || !fs::exists(out, ec)) return absl::OkStatus();
  if (fs::equivalent(fs::absolute(path, ec).parent_path(), out, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", path, " lies in --out=", out,
                                                   ", where this evaluation writes its results: keep inputs outside it"));
  }
  return absl::OkStatus();
}

// --dump (a file the grids write): refused where CheckOutputFile refuses an output (a
// directory, FIFO or device; the weights; a training run's own file; inside a checkpoint)
// and where it is one of the results files `task` writes into --out (<task>.json, .csv).
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
// already holds DIR/ppl.json: --resume continues that evaluation (refused if it is another),
// or give another --out". Before the weights are read.
absl::Status RefuseEarlierResults(const std::string& sub, const std::string& out) {
  if (absl::GetFlag(FLAGS_resume) || out.empty()) return absl::OkStatus();
  for (const std::string& name : ResumableResults(sub)) {
    const std::string path = (fs::path(out) / name).string();
    if (std::error_code ec; fs::exists(path, ec)) {
      return absl::AlreadyExistsError(absl::StrCat("--out=", out, " already holds ", path,
                                                   ": --resume continues that evaluation (refused if it is another), "
                                                   "or give another --out"));
    }
  }
  return absl::OkStatus();
}

// multiscreen_only: the evaluation reads Multiscreen's tiles (relevance), so a
// Transformer is refused in one line; every other evaluation runs either family.
absl::StatusOr<EvalSetup> Setup(const std::vector<std::string>& given, bool need_tokenizer,
                                bool multiscreen_only = false) {
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
  return {{"model", s.weights.dims.name},
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
}

// The identity of results written before eval recorded device and precision: those ran
// on the CPU in fp32, so a resume compares them as such.
json WithDeviceDefaults(json identity) {
  if (identity.is_object() && !identity.contains("device")) {
    identity["device"] = "cpu";
    identity["precision"] = "fp32";
  }
  return identity;
}

// The fields of an identity that say how an input was named, each with the field that
// says what it held: the weights by their CRC-32, --data by its sampled fingerprint,
// where train_len came from (a path under the run directory) by train_len itself.
constexpr std::pair<const char*, const char*> kNamedBy[] = {
    {"weights", "weights_crc32"}, {"data", "data_fingerprint"}, {"train_len_source", "train_len"}};

// What a --resume found (`saved`, WithDeviceDefaults applied) against this evaluation's
// identity: each field that differs, "seq_len = 16 there, 32 here", in key order joined
// by "; " (empty when they agree). Inputs are compared by content, not by how they were
// spelled (a field report: a resume from another working directory, --checkpoint=RUN
// there and --checkpoint=/abs/RUN here, was refused as "weights = ... there, ... here"):
// a path field (kNamedBy) counts only when its content field differs too, or is missing
// from either side (results from before eval recorded it).
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

// Runs tools/plot_eval.py on --out (Debian's /usr/bin/python3, which has python3-matplotlib;
// python3 from PATH where it is missing).
absl::Status Plot(const std::string& out, const std::string& kind) {
  const fs::path script = fs::path(ConfigDir()).parent_path() / "tools/plot_eval.py";
  if (!fs::is_regular_file(script)) return absl::NotFoundError(absl::StrCat("--plot: ", script.string(), " not found"));
  const std::string python = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  const std::string cmd = absl::StrCat(python, " '", script.string(), "' --kind=", kind, " '", out, "'");
  if (std::system(cmd.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("--plot: ", cmd, " failed (is python3-matplotlib installed?)"));
  }
  return absl::OkStatus();
}

// ---- ppl ------------------------------------------------------------------------------

// What --data holds: token ids in one of the formats train reads (--format, as train's:
// auto, llmc, megatron, raw_uint16; auto takes a Megatron pair, a name ending in .bin,
// .idx, .u16 or .uint16, and a file that starts with llm.c's magic), else text: JSONL
// (.jsonl, .json) or plain text, one document. Errors name --data: missing, a broken link,
// a directory, an unknown --format.
struct PplData {
  bool tokens = false;
  TokenFormat format = TokenFormat::kAuto;  // tokens only
};

// Text holds no NUL byte: token ids under a name auto does not take for tokens. The error
// for `text` (of --data, at `where`: "" or ":LINE"), OK when it has none.
absl::Status NotTextError(const std::string& path, const std::string& where, std::string_view text) {
  const size_t nul = text.find('\0');
  if (nul == std::string_view::npos) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--data=", path, where, ": a NUL byte at byte ", nul, where.empty() ? "" : " of the line",
      ": not text; token ids need --format=llmc, megatron or raw_uint16 (auto takes names ending in .bin, .idx, .u16 "
      "or .uint16, Megatron pairs and llm.c's magic)"));
}

absl::StatusOr<PplData> PplDataOf(const std::string& path, const std::vector<std::string>& given) {
  PplData d;
  if (Given(given, "format")) {
    auto f = ParseTokenFormat(absl::GetFlag(FLAGS_format));
    if (!f.ok()) return absl::InvalidArgumentError(absl::StrCat("--", f.status().message()));
    d.format = *f;
  }
  std::string bin, idx;
  if (d.format != TokenFormat::kLlmc && d.format != TokenFormat::kRawUint16 && FindMegatronPair(path, &bin, &idx)) {
    d.tokens = true;
    return d;
  }
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    if (fs::is_symlink(fs::symlink_status(path, ec))) {
      return absl::NotFoundError(absl::StrCat("--data=", path, ": a broken symbolic link (to ",
                                              fs::read_symlink(path, ec).string(), ")"));
    }
    return absl::NotFoundError(absl::StrCat("--data=", path, ": does not exist"));
  }
  if (fs::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("--data=", path, ": is a directory; eval ppl reads one file (a "
                                                   "token file such as DIR/val_000000.bin, or text or JSONL)"));
  }
  d.tokens = d.format != TokenFormat::kAuto || path.ends_with(".bin") || path.ends_with(".idx") ||
             path.ends_with(".u16") || path.ends_with(".uint16");
  if (!d.tokens && fs::is_regular_file(path, ec)) {
    // llm.c's magic says tokens; a NUL byte in the first 64 KiB says not text (before a
    // tokenizer is loaded for it). DocumentReader meets later NUL bytes as it reads.
    std::string head(64 << 10, '\0');
    std::ifstream in(path, std::ios::binary);
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<size_t>(in.gcount()));
    int32_t magic = 0;
    if (head.size() >= 4) std::memcpy(&magic, head.data(), 4);
    d.tokens = magic == kTokenFileMagic;
    if (!d.tokens) MS_RETURN_IF_ERROR(NotTextError(path, "", head));
  }
  return d;
}

const char* FormatName(TokenFormat f) {
  switch (f) {
    case TokenFormat::kLlmc: return "llmc";
    case TokenFormat::kMegatron: return "megatron";
    case TokenFormat::kRawUint16: return "raw_uint16";
    default: return "auto";
  }
}

// Documents of --data, one at a time: token ids split at EOS and at a Megatron pair's
// document boundaries (or, with --stream, read whole), a JSONL file's text field per
// line, or a text file as one document.
class DocumentReader {
 public:
  static absl::StatusOr<DocumentReader> Open(const std::string& path, const PplData& data, const ModelDims& dims,
                                             const Gpt2Tokenizer* tok, bool stream) {
    DocumentReader r;
    r.path_ = path;
    r.dims_ = dims;
    r.tok_ = tok;
    r.stream_ = stream;
    if (data.tokens) {
      auto opened = TokenStream::Open({path}, /*min_tokens_per_shard=*/0, data.format);
      if (!opened.ok()) {
        const std::string m(opened.status().message());
        return absl::Status(opened.status().code(), m.starts_with(path) ? "--data=" + m : absl::StrCat("--data=", path, ": ", m));
      }
      r.tokens_ = std::shared_ptr<const TokenStream>(std::move(*opened));
      r.kind_ = kTokens;
      r.format_ = FormatName(r.tokens_->shard_format(0));
      r.fingerprint_ = r.tokens_->Fingerprint();
      if (!stream) {
        auto boundaries = r.tokens_->DocumentBoundaries();  // a Megatron pair's documents
        if (boundaries.ok()) r.boundaries_ = std::move(*boundaries);
      }
      return r;
    }
    if (tok == nullptr) return absl::InternalError("a tokenizer is needed for text input");
    int64_t size = 0;
    auto fd = OpenRegularFile(path, "text file", INT64_MAX, &size);
    if (!fd.ok()) return absl::Status(fd.status().code(), absl::StrCat("--data=", fd.status().message()));
    ::close(*fd);
    auto fingerprint = SampledFileFingerprint(path, "text file");
    if (!fingerprint.ok()) return fingerprint.status();
    r.fingerprint_ = *fingerprint;
    r.in_ = std::make_shared<std::ifstream>(path, std::ios::binary);
    r.kind_ = path.ends_with(".jsonl") || path.ends_with(".json") ? kJsonl : kText;
    r.format_ = r.kind_ == kJsonl ? "jsonl" : "text";
    return r;
  }

  // "llmc", "megatron", "raw_uint16" (as read), "jsonl" or "text".
  const std::string& format() const { return format_; }
  // The content's sampled fingerprint: TokenStream::Fingerprint of token input (train's),
  // SampledFileFingerprint of a text file's bytes.
  const std::string& fingerprint() const { return fingerprint_; }

  // The next document; false at the end. Errors name the file (and line or token index).
  absl::StatusOr<bool> Next(std::vector<int32_t>* doc) {
    doc->clear();
    if (kind_ == kTokens) {
      constexpr int64_t kChunk = 1 << 16;
      while (pos_ < tokens_->size()) {
        if (next_boundary_ < boundaries_.size() && boundaries_[next_boundary_] <= pos_) {
          ++next_boundary_;
          if (!doc->empty() && boundaries_[next_boundary_ - 1] == pos_) return true;  // a document of the index ends
          continue;
        }
        if (chunk_at_ >= static_cast<int64_t>(chunk_.size())) {
          chunk_.resize(static_cast<size_t>(std::min(kChunk, tokens_->size() - pos_)));
          tokens_->Read(pos_, static_cast<int64_t>(chunk_.size()), chunk_.data());
          chunk_at_ = 0;
        }
        const uint32_t id = static_cast<uint32_t>(chunk_[chunk_at_]);  // a uint32 id past 2^31 - 1 is negative as int32
        if (id >= static_cast<uint32_t>(dims_.vocab)) {
          return absl::InvalidArgumentError(absl::StrCat("--data=", tokens_->Locate(pos_), " is ", id,
                                                         ", past the model's V = ", dims_.vocab));
        }
        ++pos_;
        ++chunk_at_;
        if (!stream_ && static_cast<int64_t>(id) == dims_.eos_token) {
          if (!doc->empty()) return true;
          continue;
        }
        doc->push_back(static_cast<int32_t>(id));
      }
      return !doc->empty();
    }
    if (kind_ == kText) {
      if (done_) return false;
      done_ = true;
      std::stringstream s;
      s << in_->rdbuf();
      MS_RETURN_IF_ERROR(CheckText(s.view(), ""));
      return Encode(s.str(), doc, "");
    }
    std::string line;
    while (std::getline(*in_, line)) {
      ++line_;
      MS_RETURN_IF_ERROR(CheckText(line, absl::StrCat(":", line_)));
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const json j = json::parse(line, nullptr, false);
      const std::string field = "text";
      if (!j.is_object() || !j.contains(field) || !j[field].is_string()) {
        return absl::InvalidArgumentError(absl::StrCat("--data=", path_, ":", line_, ": not a JSON object with a string \"",
                                                       field, "\""));
      }
      if (!Encode(j[field].get<std::string>(), doc, absl::StrCat(":", line_)).ok()) return false;
      if (!doc->empty()) return true;
    }
    return false;
  }

 private:
  enum Kind { kTokens, kJsonl, kText };
  absl::Status CheckText(std::string_view text, const std::string& where) const { return NotTextError(path_, where, text); }
  absl::StatusOr<bool> Encode(const std::string& text, std::vector<int32_t>* doc, const std::string& where) {
    auto ids = tok_->Encode(text);
    if (!ids.ok()) return absl::InvalidArgumentError(absl::StrCat("--data=", path_, where, ": ", ids.status().message()));
    *doc = std::move(*ids);
    return !doc->empty();
  }
  std::string path_, format_, fingerprint_;
  ModelDims dims_;
  const Gpt2Tokenizer* tok_ = nullptr;
  bool stream_ = false, done_ = false;
  Kind kind_ = kTokens;
  std::shared_ptr<std::ifstream> in_;
  std::shared_ptr<const TokenStream> tokens_;
  std::vector<int64_t> boundaries_;  // where documents start (a Megatron pair's), then size(); empty: EOS only
  size_t next_boundary_ = 0;
  std::vector<int32_t> chunk_;       // tokens [pos_ - chunk_at_, ...) of the stream
  int64_t pos_ = 0, chunk_at_ = 0, line_ = 0;
};

int Ppl(const std::vector<std::string>& given) {
  const int64_t N = absl::GetFlag(FLAGS_seq_len);
  if (N < 1) {
    return Fail("eval ppl", absl::InvalidArgumentError(
                                N == 0 ? "--seq_len=N (positions per window, >= 1) is required"
                                       : absl::StrCat("--seq_len=", N, ": must be positive (positions per window)")));
  }
  if (absl::GetFlag(FLAGS_data).empty()) return Fail("eval ppl", absl::InvalidArgumentError("--data=FILE is required"));
  const std::string method_flag = absl::GetFlag(FLAGS_method);
  if (method_flag != "auto" && method_flag != "full" && method_flag != "decode") {
    return Fail("eval ppl", absl::InvalidArgumentError(absl::StrCat("--method=", method_flag, ": expected full, decode or auto")));
  }
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"stride", absl::GetFlag(FLAGS_stride)},
                                    {"documents", absl::GetFlag(FLAGS_documents)}}) {
    if (value < 0) return Fail("eval ppl", absl::InvalidArgumentError(absl::StrCat("--", name, "=", value, ": must be >= 0")));
  }
  const std::string data = absl::GetFlag(FLAGS_data);
  if (auto s = RefuseInputInsideOut("data", data, absl::GetFlag(FLAGS_out)); !s.ok()) return Fail("eval ppl", s);
  auto data_kind = PplDataOf(data, given);
  if (!data_kind.ok()) return Fail("eval ppl", data_kind.status());
  const bool text_input = !data_kind->tokens;
  // The decoding cache (model/decoder.h) runs on either device, on the CPU in fp32 only:
  // there --method=decode is refused under bf16, and auto takes the full pass.
  auto device = DeviceFlags(given);
  if (!device.ok()) return Fail("eval ppl", device.status());
  const bool on_device = device->device != Device::kCpu, bf16 = device->precision != Precision::kFp32;
  if (method_flag == "decode" && !on_device && bf16) {
    return Fail("eval ppl", absl::InvalidArgumentError(
                                "--method=decode with --precision=bf16: the CPU's decoding cache runs in fp32; use "
                                "--method=full (or auto), or --device=cuda for bf16 decoding"));
  }
  auto setup = Setup(given, text_input);
  if (!setup.ok()) return Fail("eval ppl", setup.status());
  if (auto s = setup->UseYarnFor(N); !s.ok()) return Fail("eval ppl", s);
  eval::ModelRunner runner(setup->weights, setup->options, setup->device);
  // Full pass when it fits in memory (it is the cheaper one: the decode path computes the
  // whole vocabulary's logits at every position); else the decoding cache.
  // Either pass also holds the loss by position (sums, means, the smoothed curve: about 32
  // bytes a position), in double so that a huge --seq_len saturates rather than wraps.
  auto with_sums = [N](int64_t bytes) {
    const double total = double(bytes) + 32.0 * double(N);
    return total >= 9.2e18 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(total);
  };
  std::string method = method_flag;
  if (on_device) {
    // Either pass on the device: its activations, or its decoding cache, against the
    // device's free memory (read after the parameters were uploaded); auto takes the full
    // pass when it fits. Then the host's part: besides the weights already loaded, one
    // window's tokens and losses and the loss by position (about 32 bytes a position).
    const int64_t free_bytes = eval::DeviceFreeBytes(), full_bytes = runner.FullPassBytes(N),
                  decode_bytes = runner.DecodeBytes(N < std::numeric_limits<int64_t>::max() ? N + 1 : N);
    if (method == "auto") method = free_bytes == 0 || full_bytes < free_bytes * 0.8 ? "full" : "decode";
    const int64_t need = method == "full" ? full_bytes : decode_bytes;
    if (free_bytes > 0 && need > free_bytes) {
      return Fail("eval ppl", absl::ResourceExhaustedError(absl::StrCat(
                                  "--seq_len=", N, ": the ", method, " pass on ", DeviceName(setup->device.device),
                                  " needs about ", GiB(need), ", ", GiB(free_bytes), " free on the device (full pass ",
                                  GiB(full_bytes), ", decoding cache ", GiB(decode_bytes), ")")));
    }
    if (const int64_t avail = eval::AvailableMemoryBytes(), host_need = with_sums(0); avail > 0 && host_need > avail) {
      return Fail("eval ppl", absl::ResourceExhaustedError(absl::StrCat("--seq_len=", N, ": the loss by position needs about ",
                                                                        GiB(host_need), " of host memory, ", GiB(avail),
                                                                        " available")));
    }
  } else {
    const int64_t avail = eval::AvailableMemoryBytes(), full_bytes = with_sums(runner.FullPassBytes(N)),
                  decode_bytes = with_sums(runner.DecodeBytes(N < std::numeric_limits<int64_t>::max() ? N + 1 : N));
    if (method == "auto") method = avail == 0 || full_bytes < avail * 0.8 || bf16 ? "full" : "decode";
    const int64_t need = method == "full" ? full_bytes : decode_bytes;
    if (avail > 0 && need > avail) {
      return Fail("eval ppl", absl::ResourceExhaustedError(absl::StrCat(
                                  "--seq_len=", N, ": the ", method, " pass needs about ", GiB(need), ", ", GiB(avail),
                                  " available (full pass ", GiB(full_bytes), ", decoding cache ", GiB(decode_bytes), ")")));
    }
  }
  auto reader = DocumentReader::Open(data, *data_kind, setup->weights.dims, setup->tokenizer.get(), absl::GetFlag(FLAGS_stream));
  if (!reader.ok()) return Fail("eval ppl", reader.status());

  const std::string out = setup->out, state_path = out + "/ppl_state.json";
  eval::PositionLoss acc(N);
  int64_t skip_windows = 0;
  json identity = SetupJson(*setup);
  identity["data"] = data;
  // What --data held (its format as read, and a sampled fingerprint of its content, as
  // train's manifest records): a file overwritten between two runs shows.
  identity["data_format"] = reader->format();
  identity["data_fingerprint"] = reader->fingerprint();
  identity["seq_len"] = N;
  identity["stride"] = absl::GetFlag(FLAGS_stride);
  identity["stream"] = absl::GetFlag(FLAGS_stream);
  if (absl::GetFlag(FLAGS_resume)) {
    const json state = ReadJsonFile(state_path);
    if (!state.is_object()) {
      return Fail("eval ppl", absl::NotFoundError(absl::StrCat("--resume: ", state_path, " is missing or not JSON")));
    }
    const json saved = WithDeviceDefaults(state.value("identity", json()));
    if (const std::string differs = IdentityDifferences(saved, identity); !differs.empty()) {
      // The same --data path with another content: the windows would be averaged with
      // another file's under one result.
      if (saved.is_object() && saved.value("data", json()) == identity["data"] &&
          saved.value("data_fingerprint", json()) != identity["data_fingerprint"]) {
        return Fail("eval ppl", absl::FailedPreconditionError(absl::StrCat(
                                    "--resume: --data=", data,
                                    saved.contains("data_fingerprint")
                                        ? absl::StrCat(" changed since ", state_path, " was written")
                                        : absl::StrCat(" may have changed: ", state_path,
                                                       " is from before eval recorded what --data held"),
                                    ", and its windows would be averaged with another file's; rerun without --resume "
                                    "(into a new --out): ",
                                    differs)));
      }
      return Fail("eval ppl", absl::FailedPreconditionError(
                                  absl::StrCat("--resume: ", state_path, " is of another evaluation: ", differs)));
    }
    skip_windows = state["windows"].get<int64_t>();
    // A smaller --documents cannot take back windows already averaged (it was ignored).
    if (const int64_t limit = absl::GetFlag(FLAGS_documents); limit > 0 && skip_windows > limit) {
      return Fail("eval ppl", absl::FailedPreconditionError(absl::StrCat(
                                  "--resume: --documents=", limit, " is fewer than the ", skip_windows, " windows ",
                                  state_path, " already averages; give --documents=", skip_windows,
                                  " or more (0: all), or rerun without --resume into a new --out")));
    }
    acc.Restore(state["sums"].get<std::vector<double>>(), skip_windows);
    std::fprintf(stderr, "eval ppl: resuming after %lld windows\n", static_cast<long long>(skip_windows));
  }
  const int64_t max_windows = absl::GetFlag(FLAGS_documents);
  const int64_t stride = absl::GetFlag(FLAGS_stride) > 0 ? absl::GetFlag(FLAGS_stride)
                         : absl::GetFlag(FLAGS_stream) ? N + 1
                                                       : 0;
  std::vector<int32_t> doc;
  std::vector<float> losses(N);
  int64_t documents = 0, skipped = 0, windows = 0, longest = 0, tokens_timed = 0;
  double seconds = 0;
  const auto start = Clock::now();
  auto last_report = start;
  auto save = [&](bool final) -> absl::Status {
    json state = {{"identity", identity}, {"windows", acc.documents()}, {"sums", acc.sums()}};
    MS_RETURN_IF_ERROR(WriteTextFile(state_path, state.dump()));
    const auto mean = acc.Mean();
    const auto smooth = acc.Smoothed();
    const eval::FlatVerdict verdict = eval::PastTrainingLength(smooth, setup->options.train_len);
    json result = identity;
    result["complete"] = final;
    result["method"] = method;
    result["documents"] = acc.documents();
    result["documents_read"] = documents;
    result["skipped_short"] = skipped;
    result["tokens_per_s"] = seconds > 0 ? tokens_timed / seconds : 0.0;
    // The most bytes the process held on the GPU (0 on the CPU; the kernel tables' workspaces included).
    result["device_bytes_peak"] = BufferBytesPeak(Device::kCuda);
    result["mean_loss_all"] = acc.documents() ? std::accumulate(mean.begin(), mean.end(), 0.0) / N : 0.0;
    result["verdict"] = {{"applicable", verdict.applicable}, {"flat", verdict.flat}, {"before", verdict.before},
                         {"after", verdict.after}, {"line", verdict.line}};
    std::vector<int64_t> positions(N);
    std::iota(positions.begin(), positions.end(), 1);
    result["position"] = positions;
    result["mean_loss"] = mean;
    result["smoothed_loss"] = smooth;
    MS_RETURN_IF_ERROR(WriteTextFile(out + "/ppl.json", result.dump()));
    std::string csv = "position,mean_loss,smoothed_loss,perplexity,documents\n";
    for (int64_t p = 0; p < N; ++p) {
      csv += absl::StrFormat("%d,%.6f,%.6f,%.4f,%d\n", p + 1, mean[p], smooth[p], std::exp(smooth[p]), acc.documents());
    }
    return WriteTextFile(out + "/ppl.csv", csv);
  };
  bool full = false;
  while (!full) {
    auto more = reader->Next(&doc);
    if (!more.ok()) return Fail("eval ppl", more.status());
    if (!*more) break;
    ++documents;
    longest = std::max<int64_t>(longest, doc.size());
    if (static_cast<int64_t>(doc.size()) < N + 1) {
      ++skipped;
      continue;
    }
    for (int64_t off = 0; off + N + 1 <= static_cast<int64_t>(doc.size()); off += stride) {
      if (max_windows > 0 && windows >= max_windows) {
        full = true;
        break;
      }
      if (windows++ < skip_windows) {
        if (stride == 0) break;
        continue;
      }
      const auto t0 = Clock::now();
      if (method == "full") {
        runner.TokenLossesFull(doc.data() + off, N + 1, losses.data());
      } else {
        runner.TokenLossesDecode(doc.data() + off, N + 1, losses.data());
      }
      seconds += Seconds(t0);
      tokens_timed += N;
      acc.Add(losses.data());
      if (Seconds(last_report) > 10) {
        last_report = Clock::now();
        if (auto s = save(false); !s.ok()) return Fail("eval ppl", s);
        const double rate = tokens_timed / seconds;
        const std::string eta = max_windows > 0 ? Duration((max_windows - windows) * double(N) / rate) : "?";
        std::fprintf(stderr, "eval ppl: %lld windows, %.0f tokens/s, ETA %s\n", static_cast<long long>(windows), rate, eta.c_str());
      }
      if (stride == 0) break;
    }
  }
  if (acc.documents() == 0) {
    return Fail("eval ppl", absl::InvalidArgumentError(absl::StrCat(
                                "--data=", data, ": no document has --seq_len + 1 = ", N + 1, " tokens (", skipped,
                                " of ", documents, " skipped as shorter; the longest has ", longest,
                                ")", absl::GetFlag(FLAGS_stream) ? "" : "; --stream reads the input as one stream")));
  }
  if (auto s = save(true); !s.ok()) return Fail("eval ppl", s);
  const auto smooth = acc.Smoothed();
  const eval::FlatVerdict verdict = eval::PastTrainingLength(smooth, setup->options.train_len);
  std::printf("eval ppl: %lld windows of %lld tokens from %s (%lld documents shorter than %lld skipped), %s pass (%s), "
              "train_len %lld (%s), %s windows\n",
              static_cast<long long>(acc.documents()), static_cast<long long>(N), data.c_str(), static_cast<long long>(skipped),
              static_cast<long long>(N + 1), method.c_str(),
              DeviceWords(setup->device).c_str(), static_cast<long long>(setup->options.train_len),
              setup->train_len_source.c_str(), setup->options.expand_windows ? "expanded" : "as-learned");
  for (int64_t p : {int64_t{1}, std::min(N, setup->options.train_len), N}) {
    std::printf("  position %7lld: smoothed loss %.4f (perplexity %.2f)\n", static_cast<long long>(p), smooth[p - 1],
                std::exp(smooth[p - 1]));
  }
  if (setup->options.yarn_factor != 1.0) {
    std::printf("  YaRN factor %.6g%s\n", setup->options.yarn_factor, setup->yarn.automatic ? " (context-matched: seq_len / train_len)" : "");
  }
  std::printf("  %.0f tokens/s\n  %s\n", seconds > 0 ? tokens_timed / seconds : 0.0, verdict.line.c_str());
  std::printf("  results: %s/ppl.json, %s/ppl.csv\n", out.c_str(), out.c_str());
  if (absl::GetFlag(FLAGS_plot)) {
    if (auto s = Plot(out, "ppl"); !s.ok()) return Fail("eval ppl", s);
  }
  return 0;
}

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

struct TaskInstance {
  std::string prompt, answer;
};

struct GridTask {
  const char* name;     // "abcdigits" | "passkey"
  int64_t max_new = 6;  // tokens generated
  int64_t tokens_per_unit = 1;  // prompt tokens per unit of --contexts (abcdigits --mode=lines: ≤ 9 per line)
  std::function<absl::StatusOr<std::vector<TaskInstance>>(int64_t context, double depth, int64_t instances)> make;
  std::function<bool(const std::string& output, const std::string& answer)> score;
  std::function<std::string(const std::string& output)> shown;  // what the dump records as the output
};

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
  identity["mode"] = std::string(task.name) == "abcdigits" ? absl::GetFlag(FLAGS_mode) : "tokens";
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
      if (setup.yarn.automatic) {  // context-matched: this cell's prompt and answer over train_len
        auto first = setup.tokenizer->Encode(instances->front().prompt);
        if (!first.ok()) return Fail(cmd.c_str(), first.status());
        if (auto s = setup.UseYarnFor(static_cast<int64_t>(first->size()) + task.max_new); !s.ok()) {
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

int AbcDigits(const std::vector<std::string>& given) {
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode != "lines" && mode != "tokens") {
    return Fail("eval abcdigits", absl::InvalidArgumentError(absl::StrCat("--mode=", mode, ": expected lines or tokens")));
  }
  if (absl::GetFlag(FLAGS_generate_only)) {
    // --generate_only runs no model: a model's or a grid's flag beside it was ignored
    // without a word (`--generate_only --checkpoint=X` looked like an evaluation of X).
    for (const char* unused : {"checkpoint", "weights", "train_len", "as_learned", "yarn_factor", "device", "precision",
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
  task.make = [&](int64_t c, double d, int64_t n) { return AbcInstances(mode, c, d, n, tok); };
  // Exact match of the first 6 characters the 6 greedy tokens spell.
  task.shown = [](const std::string& out) { return out.substr(0, 6); };
  task.score = [](const std::string& out, const std::string& answer) { return out.substr(0, answer.size()) == answer; };
  return RunGrid(task, *setup);
}

int Passkey(const std::vector<std::string>& given) {
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

// ---- ttft -----------------------------------------------------------------------------

int Ttft(const std::vector<std::string>& given) {
  const int64_t N = absl::GetFlag(FLAGS_context), repeats = absl::GetFlag(FLAGS_repeats), warmup = absl::GetFlag(FLAGS_warmup);
  for (const auto& [name, value, least] : {std::tuple<const char*, int64_t, int64_t>{"context", N, 1},
                                           {"repeats", repeats, 1}, {"warmup", warmup, 0}}) {
    if (value < least) {
      return Fail("eval ttft", absl::InvalidArgumentError(absl::StrCat("--", name, "=", value, ": must be >= ", least)));
    }
  }
  auto setup = Setup(given, false);
  if (!setup.ok()) return Fail("eval ttft", setup.status());
  if (auto s = setup->UseYarnFor(N); !s.ok()) return Fail("eval ttft", s);
  const bool on_device = setup->device.device != Device::kCpu;
  // "cuda:0 (NVIDIA H200)": which GPU the times are of (cudaSetDevice(0), as a single rank binds).
  std::string device_name = "cpu";
  if (on_device) {
    auto bound = BindDevice(0);
    if (!bound.ok()) return Fail("eval ttft", bound.status());
    device_name = *bound;
  }
  eval::ModelRunner runner(setup->weights, setup->options, setup->device);
  // The prefill's activations against the memory of the device they live on: MemAvailable
  // on the CPU, the free device memory (read after the parameters were uploaded) on a GPU,
  // where host memory holds only the weights already loaded and the ids.
  const int64_t avail = on_device ? eval::DeviceFreeBytes() : eval::AvailableMemoryBytes(), need = runner.FullPassBytes(N);
  if (avail > 0 && need > avail) {
    return Fail("eval ttft", absl::ResourceExhaustedError(absl::StrCat("--context=", N, ": the prefill needs about ", GiB(need),
                                                                       ", ", GiB(avail), on_device ? " free on the device" : " available")));
  }
  // Token ids drawn uniformly (the work of a prefill does not depend on the text).
  eval::PythonRandom rng(absl::GetFlag(FLAGS_generator_seed));
  std::vector<int32_t> ids(N);
  for (int32_t& id : ids) id = static_cast<int32_t>(rng.RandBelow(setup->weights.dims.vocab));
  for (int64_t i = 0; i < warmup; ++i) runner.Prefill(ids.data(), N, /*first_token=*/false);
  // Each timed prefill starts with the device idle and ends with it synchronized (Prefill
  // synchronizes before returning); on a device the argmax of the first token is taken on
  // the host after the timed runs, so the times are the device's work.
  std::vector<double> times;
  for (int64_t i = 0; i < repeats; ++i) {
    runner.Synchronize();
    const auto t0 = Clock::now();
    runner.Prefill(ids.data(), N, /*first_token=*/false);
    times.push_back(Seconds(t0));
  }
  const int32_t first = runner.LastToken();
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const double median = repeats % 2 ? sorted[repeats / 2] : 0.5 * (sorted[repeats / 2 - 1] + sorted[repeats / 2]);
  const double mean = std::accumulate(times.begin(), times.end(), 0.0) / repeats;
  double var = 0;
  for (double t : times) var += (t - mean) * (t - mean);
  const double stdev = repeats > 1 ? std::sqrt(var / (repeats - 1)) : 0.0;
  json result = SetupJson(*setup);
  result.update({{"context", N}, {"batch", 1}, {"device_name", device_name}, {"warmup", warmup},
                 {"repeats", repeats}, {"times_s", times}, {"median_s", median}, {"mean_s", mean}, {"stdev_s", stdev},
                 {"min_s", sorted.front()}, {"max_s", sorted.back()}, {"tokens_per_s", N / median},
                 {"threads", std::getenv("OMP_NUM_THREADS") ? std::getenv("OMP_NUM_THREADS") : "default"},
                 {"first_token", first}, {"estimated_bytes", need}, {"device_bytes_peak", BufferBytesPeak(Device::kCuda)}});
  const std::string path = absl::StrCat(setup->out, "/ttft_", N, ".json");
  if (auto s = WriteTextFile(path, result.dump(1)); !s.ok()) return Fail("eval ttft", s);
  std::printf("eval ttft: %s, %lld tokens, batch 1, %s on %s, %s windows (train_len %lld)\n", setup->weights.dims.name.c_str(),
              static_cast<long long>(N), eval::PrecisionName(setup->device.precision).c_str(), device_name.c_str(),
              setup->options.expand_windows ? "expanded" : "as-learned", static_cast<long long>(setup->options.train_len));
  std::printf("  median %.3f s, mean %.3f s, stdev %.3f s, min %.3f s, max %.3f s over %lld runs after %lld warm-up; %.0f tokens/s\n",
              median, mean, stdev, sorted.front(), sorted.back(), static_cast<long long>(repeats), static_cast<long long>(warmup),
              N / median);
  std::printf("  results: %s\n", path.c_str());
  return 0;
}


// ---- relevance ----------------------------------------------------------------------------

// A list flag of indices in [0, n); empty means all of them.
absl::StatusOr<std::vector<bool>> ParseIndexSet(const std::string& flag, const std::string& text, int64_t n) {
  std::vector<bool> set(n, text.empty());
  MS_ASSIGN_OR_RETURN(const std::vector<std::string> parts, SplitListFlag(flag, text));
  for (const std::string& part : parts) {
    int64_t v;
    if (!IsDecimalInteger(part) || !absl::SimpleAtoi(part, &v) || v < 0 || v >= n) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", text, ": '", part, "' is not an index in [0, ", n, ")"));
    }
    set[v] = true;
  }
  return set;
}

constexpr int64_t kMaxRelevanceTokens = 8192;

int Relevance(const std::vector<std::string>& given) {
  const std::string path = absl::GetFlag(FLAGS_text);
  if (path.empty()) return Fail("eval relevance", absl::InvalidArgumentError("--text=FILE is required"));
  if (absl::Status s = CheckRegularInput(path); !s.ok()) {  // "--text=a.txt: No such file or directory", "...: is a directory, ..."
    return Fail("eval relevance", absl::Status(s.code(), absl::StrCat("--text=", s.message())));
  }
  if (auto s = RefuseInputInsideOut("text", path, absl::GetFlag(FLAGS_out)); !s.ok()) return Fail("eval relevance", s);
  auto setup = Setup(given, true, /*multiscreen_only=*/true);
  if (!setup.ok()) return Fail("eval relevance", setup.status());
  const ModelDims& d = setup->weights.dims;
  auto layers = ParseIndexSet("layers", absl::GetFlag(FLAGS_layers), d.n_layers);
  if (!layers.ok()) return Fail("eval relevance", layers.status());
  auto tiles = ParseIndexSet("map_tiles", absl::GetFlag(FLAGS_map_tiles), d.n_heads);
  if (!tiles.ok()) return Fail("eval relevance", tiles.status());
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  auto ids = setup->tokenizer->Encode(text.str());
  if (!ids.ok()) return Fail("eval relevance", absl::InvalidArgumentError(absl::StrCat("--text=", path, ": ", ids.status().message())));
  if (ids->empty()) return Fail("eval relevance", absl::InvalidArgumentError(absl::StrCat("--text=", path, ": no tokens")));
  if (static_cast<int64_t>(ids->size()) > kMaxRelevanceTokens) {
    return Fail("eval relevance", absl::InvalidArgumentError(absl::StrCat("--text=", path, ": ", ids->size(), " tokens; the inspection forward (double precision, O(T·w) per tile) takes at most ", kMaxRelevanceTokens)));
  }
  for (int32_t id : *ids) {
    if (id >= d.vocab) return Fail("eval relevance", absl::InvalidArgumentError(absl::StrCat("--text=", path, ": token ", id, " is past the model's V = ", d.vocab, " (wrong --tokenizer?)")));
  }
  std::vector<std::vector<bool>> keep(d.n_layers, std::vector<bool>(d.n_heads, false));
  for (int64_t l = 0; l < d.n_layers; ++l) {
    for (int64_t t = 0; t < d.n_heads; ++t) keep[l][t] = (*layers)[l] && (*tiles)[t];
  }
  // position ROPE: auto is the text's length over train_len
  if (auto s = setup->UseYarnFor(static_cast<int64_t>(ids->size())); !s.ok()) return Fail("eval relevance", s);
  const auto start = Clock::now();
  const std::vector<eval::TileRelevance> rel = eval::InspectRelevance(setup->weights, setup->options, *ids, keep, nullptr);
  json tokens = json::array();
  for (int32_t id : *ids) {
    auto piece = setup->tokenizer->Decode({id});
    tokens.push_back(piece.ok() ? *piece : "?");
  }
  json tiles_json = json::array(), maps = json::array();
  std::string csv = "layer,tile,w,r,w_used,window_pairs,nonzero_pairs,fraction_nonzero\n";
  for (const eval::TileRelevance& t : rel) {
    const double frac = t.window_pairs ? double(t.nonzero_pairs) / t.window_pairs : 0.0;
    const json w_used = std::isinf(t.w_used) ? json("inf") : json(t.w_used);
    tiles_json.push_back({{"layer", t.layer}, {"tile", t.tile}, {"w", t.w}, {"r", t.r}, {"w_used", w_used},
                          {"window_pairs", t.window_pairs}, {"nonzero_pairs", t.nonzero_pairs}, {"fraction_nonzero", frac}});
    csv += absl::StrFormat("%d,%d,%.6g,%.6g,%s,%d,%d,%.6f\n", t.layer, t.tile, t.w, t.r,
                           std::isinf(t.w_used) ? "inf" : absl::StrFormat("%.6g", t.w_used), t.window_pairs, t.nonzero_pairs, frac);
    if (!keep[t.layer][t.tile]) continue;
    json pairs = json::array();
    for (const eval::RelevancePair& p : t.pairs) pairs.push_back({p.i, p.j, p.alpha, p.mask});
    maps.push_back({{"layer", t.layer}, {"tile", t.tile}, {"pairs", pairs}});
  }
  json result = SetupJson(*setup);
  result.update({{"text", path}, {"tokens", tokens}, {"tiles", tiles_json}, {"maps", maps},
                 {"pair_fields", {"i", "j", "alpha", "m"}}});
  if (auto s = WriteTextFile(setup->out + "/relevance.json", result.dump()); !s.ok()) return Fail("eval relevance", s);
  if (auto s = WriteTextFile(setup->out + "/tiles.csv", csv); !s.ok()) return Fail("eval relevance", s);
  std::printf("eval relevance: %zu tokens of %s, %lld x %lld tiles in %s, %s windows (train_len %lld)\n", ids->size(), path.c_str(),
              static_cast<long long>(d.n_layers), static_cast<long long>(d.n_heads), Duration(Seconds(start)).c_str(),
              setup->options.expand_windows ? "expanded" : "as-learned", static_cast<long long>(setup->options.train_len));
  std::printf("  %5s %4s %10s %7s %10s\n", "layer", "tile", "w", "r", "nonzero");
  for (const eval::TileRelevance& t : rel) {
    std::printf("  %5lld %4lld %10.1f %7.3f %9.1f%%%s\n", static_cast<long long>(t.layer), static_cast<long long>(t.tile), t.w, t.r,
                t.window_pairs ? 100.0 * t.nonzero_pairs / t.window_pairs : 0.0, std::isinf(t.w_used) ? "  (w expanded to inf)" : "");
  }
  std::printf("  results: %s/relevance.json (maps of %zu tiles), %s/tiles.csv\n", setup->out.c_str(), maps.size(), setup->out.c_str());
  if (absl::GetFlag(FLAGS_plot)) {
    if (auto s = Plot(setup->out, "relevance"); !s.ok()) return Fail("eval relevance", s);
  }
  return 0;
}

// ---- choice: zero-shot multiple choice (eval/choice.h) -----------------------------------

int Choice(const std::vector<std::string>& given) {
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

constexpr char kUsage[] =
    "usage: multiscreen eval ppl (--checkpoint=DIR | --weights=W.h5) --data=FILE --seq_len=N --out=DIR [--documents=K\n"
    "                            --stride=S --stream --method=auto|full|decode --train_len=T --as_learned --plot --resume\n"
    "                            --format=auto|llmc|megatron|raw_uint16] (--data: token ids as train reads them, or text/JSONL)\n"
    "       multiscreen eval abcdigits (--checkpoint=DIR | --weights=W.h5) --out=DIR [--contexts=4096,... --depths=0.1,...\n"
    "                            --instances=K --mode=tokens|lines --dump=F.jsonl --plot --resume]\n"
    "       multiscreen eval abcdigits --generate_only --mode=lines|tokens --length=N --depth=D --instances=K --dump=F.jsonl\n"
    "       multiscreen eval passkey (--checkpoint=DIR | --weights=W.h5) --out=DIR [--contexts= --depths= --instances= --dump=]\n"
    "       multiscreen eval ttft (--checkpoint=DIR | --weights=W.h5) --context=N --out=DIR [--repeats=5 --warmup=2]\n"
    "       multiscreen eval relevance (--checkpoint=DIR | --weights=W.h5) --text=FILE --out=DIR [--layers=0,3 --map_tiles=0,7 --plot]\n"
    "       multiscreen eval choice (--checkpoint=DIR | --weights=W.h5) --task=FILE.jsonl --format=hellaswag|piqa|arc|winogrande\n"
    "                            --out=DIR [--seq_len=N]\n"
    "       every evaluation of a model: [--threads=N] (CPU worker threads; 0: all cores)\n"
    "       ppl, abcdigits, passkey, ttft, choice: [--device=cpu|cuda --precision=fp32|bf16] (where the model runs, the full\n"
    "                            forward and the decoding cache; default cpu, fp32; on the CPU the decoding cache, so\n"
    "                            --method=decode and the grids, is fp32)\n"
    "       a RoPE model (Transformer; Multiscreen position: ROPE), every evaluation: [--yarn_factor=F|auto]\n"
    "                            (YaRN at inference; auto: length / train_len)\n"
    "       choice's --format (required) is the benchmark's: hellaswag|piqa|arc|winogrande (not a token file format)\n";

// kUsage's entries for `sub` alone: its own lines ("multiscreen eval <sub> ...", with their
// continuation lines) and the notes that apply to it (every evaluation's --threads; the
// device flags but for relevance; RoPE's --yarn_factor; choice's --format). `one_line`:
// joined into one line with single blanks, for an error's "; usage: ...".
std::string SubcommandUsage(const std::string& sub, bool one_line) {
  std::vector<std::string> entries;  // each with its continuation lines
  for (absl::string_view line : absl::StrSplit(kUsage, '\n', absl::SkipEmpty())) {
    const absl::string_view text = absl::StripLeadingAsciiWhitespace(line);
    const bool continuation = line.size() - text.size() > 7;  // deeper than "usage: " and "       "
    if (continuation && !entries.empty()) {
      absl::StrAppend(&entries.back(), "\n", line);
    } else {
      entries.emplace_back(absl::StripPrefix(text, "usage: "));
    }
  }
  std::vector<std::string> chosen;
  for (const std::string& e : entries) {
    const bool own = absl::StartsWith(e, absl::StrCat("multiscreen eval ", sub, " "));
    const bool note = absl::StartsWith(e, "every evaluation") || absl::StartsWith(e, "a RoPE model") ||
                      (sub != "relevance" && absl::StartsWith(e, "ppl, abcdigits")) ||
                      (sub == "choice" && absl::StartsWith(e, "choice's --format"));
    if (own || note) chosen.push_back(e);
  }
  std::string text;
  if (!one_line) {
    for (size_t i = 0; i < chosen.size(); ++i) absl::StrAppend(&text, i == 0 ? "usage: " : "\n       ", chosen[i]);
    return text;
  }
  for (const std::string& e : chosen) {
    if (!absl::StartsWith(e, "multiscreen eval ")) continue;  // the notes make no line of an error
    if (!text.empty()) absl::StrAppend(&text, " | ");        // abcdigits' two forms
    const std::vector<absl::string_view> words = absl::StrSplit(e, absl::ByAnyChar(" \n"), absl::SkipEmpty());
    absl::StrAppend(&text, absl::StrJoin(words, " "));
  }
  return text;
}

}  // namespace

int EvalCommand(int argc, char** argv) {
  if (argc < 2) return Fail("eval", absl::InvalidArgumentError("expected a subcommand: ppl, abcdigits, passkey, ttft, relevance or choice"));
  const std::string sub = argv[1];
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::printf("%s", kUsage);
    return 0;
  }
  const std::initializer_list<std::string_view> model = {"checkpoint", "weights", "train_len", "as_learned", "out", "tokenizer",
                                                         "yarn_factor", "threads"};
  std::vector<std::string_view> accepted(model);
  if (sub == "ppl" || sub == "abcdigits" || sub == "passkey" || sub == "ttft" || sub == "choice") {
    accepted.insert(accepted.end(), {"device", "precision"});
  }
  if (sub == "ppl") {
    accepted.insert(accepted.end(), {"data", "format", "seq_len", "documents", "stride", "stream", "method", "plot", "resume"});
  } else if (sub == "abcdigits" || sub == "passkey") {
    accepted.insert(accepted.end(), {"contexts", "depths", "instances", "dump", "generator_seed", "plot", "resume"});
    if (sub == "abcdigits") accepted.insert(accepted.end(), {"generate_only", "mode", "length", "depth"});
  } else if (sub == "ttft") {
    accepted.insert(accepted.end(), {"context", "repeats", "warmup", "generator_seed"});
  } else if (sub == "relevance") {
    accepted.insert(accepted.end(), {"text", "layers", "map_tiles", "plot"});
  } else if (sub == "choice") {
    accepted.insert(accepted.end(), {"task", "format", "seq_len"});
  } else {
    return Fail("eval", absl::InvalidArgumentError(absl::StrCat("unknown subcommand '", sub,
                                                                "': expected ppl, abcdigits, passkey, ttft, relevance or choice")));
  }
  // From here on the subcommand is known: errors say "multiscreen eval ppl: ...".
  const std::string cmd = absl::StrCat("eval ", sub);
  // ParseFlags takes an initializer_list; check the given flags against `accepted` here.
  const std::vector<std::string> given = GivenFlags(argc - 1, argv + 1);
  for (const std::string& g : given) {
    if (std::find(accepted.begin(), accepted.end(), g) == accepted.end()) {
      return Fail(cmd.c_str(), absl::InvalidArgumentError(absl::StrCat("--", g, " is not a flag of 'eval ", sub,
                                                                       "'; usage: ", SubcommandUsage(sub, true))));
    }
  }
  // --help: this evaluation's usage and flags, not every evaluation's.
  const std::string usage = SubcommandUsage(sub, false);
  std::vector<std::string> args;
  if (auto s = ParseFlagsAndArgs(argc - 1, argv + 1, usage.c_str(), accepted, &args); !s.ok()) {
    return Fail(cmd.c_str(), s);
  }
  if (!args.empty()) return Fail(cmd.c_str(), absl::InvalidArgumentError(absl::StrCat("unexpected argument '", args[0], "'")));
  // One process: under `mpirun -n 2` every rank ran the whole evaluation into the same --out.
  if (int rc = RefuseSeveralProcesses("eval"); rc != 0) return rc;
  // Setup makes --out before each evaluation checks its own flags and data: a refused
  // evaluation takes away the directory it made while it is still empty (one it found is
  // left as it was).
  const std::string out = absl::GetFlag(FLAGS_out);
  std::error_code ec;
  const bool out_existed = out.empty() || fs::exists(out, ec);
  auto remove_unused_out = [out, out_existed] {
    std::error_code ec;
    if (!out_existed && fs::is_directory(out, ec) && fs::is_empty(out, ec)) fs::remove(out, ec);
  };
  OnDeviceOutOfMemory(absl::StrCat("eval ", sub), DeviceMemoryAdvice(sub), remove_unused_out);
  if (auto s = RefuseEarlierResults(sub, out); !s.ok()) return Fail(absl::StrCat("eval ", sub).c_str(), s);
  int rc;
  if (sub == "ppl") {
    rc = Ppl(given);
  } else if (sub == "abcdigits") {
    rc = AbcDigits(given);
  } else if (sub == "passkey") {
    rc = Passkey(given);
  } else if (sub == "relevance") {
    rc = Relevance(given);
  } else if (sub == "choice") {
    rc = Choice(given);
  } else {
    rc = Ttft(given);
  }
  if (rc != 0) remove_unused_out();
  return rc;
}

}  // namespace multiscreen::cli
