// `multiscreen generate (--checkpoint=DIR | --weights=FILE.h5) --prompt=TEXT
// [--max_tokens=N --tokenizer=DIR --train_len=T --as_learned --yarn_factor=F|auto --yarn_ramp=paper|code
// --sigmoid_bias_length=N|auto
// --device=cpu|cuda --precision=fp32|bf16]`: greedy decoding with the decoding cache
// (model/decoder.h: Multiscreen's tile caches with the window-expansion rule, spec
// "Inference"; the Transformer's KV cache, issue 18), on the CPU (the default, fp32) or a
// CUDA device (issue 29; eval::ModelRunner::Greedy, as eval's grids; the argmax taken on
// the device, so one int32 a token crosses). Prints the prompt followed by the
// continuation and a newline, streamed: the prompt at once, then each token's bytes as it
// is chosen, flushed (a character that a token leaves unfinished waits for the next,
// data/utf8.h's Utf8Holdback), so the bytes equal the whole output's. SIGINT / SIGTERM
// (trainer/stop_signal.h's handlers) stop decoding after the current token: what was
// generated is printed with the newline, one line on stderr says so, and the exit status
// is 128 + the signal's number (130 for SIGINT, 143 for SIGTERM).
#include <csignal>
#include <cstdio>
#include <string_view>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/weights_source.h"
#include "cli/commands.h"
#include "cli/device_memory.h"
#include "cli/flags.h"
#include "cli/run_data.h"
#include "data/gpt2_tokenizer.h"
#include "data/utf8.h"
#include "eval/model_runner.h"
#include "eval/sigmoid_bias.h"
#include "eval/yarn.h"
#include "trainer/stop_signal.h"

ABSL_FLAG(std::string, prompt, "", "text to continue (empty: an unconditional sample, from the end-of-text token)");
ABSL_FLAG(int64_t, max_tokens, 32, "tokens to generate: 0 to 2^31 - 1 (kMaxNewTokens)");
ABSL_FLAG(int64_t, train_len, 4096,
          "longest training sequence length (window expansion past it); not given: the run's recorded one, else 4096");
ABSL_FLAG(bool, as_learned, false, "keep every learned window (no window expansion)");
ABSL_FLAG(std::string, yarn_factor, "1",
          "YaRN's scale factor F >= 1 for a RoPE model (the Transformer, Multiscreen with position: ROPE; 1: plain "
          "RoPE), or auto: the evaluation length over the training length (context-matched)");
ABSL_FLAG(std::string, yarn_ramp, "paper",
          "YaRN's ramp over the RoPE pairs: paper (the paper's equation, linear in the turns r) or code (the YaRN "
          "authors' code and Hugging Face's, linear in the pair index; kernels/cpu/rope.h)");
ABSL_FLAG(std::string, sigmoid_bias_length, "",
          "attention SIGMOID: the n of its bias -log n at inference, a number of tokens or auto (the evaluation "
          "length); not given: the training length (eval/sigmoid_bias.h)");

ABSL_DECLARE_FLAG(std::string, checkpoint);
ABSL_DECLARE_FLAG(std::string, weights);
ABSL_DECLARE_FLAG(std::string, device);
ABSL_DECLARE_FLAG(std::string, precision);

namespace multiscreen::cli {
namespace {

// Writes `bytes` to stdout and flushes; false when either fails (a closed pipe: SIGPIPE
// is ignored once the stop handlers are installed, so the write fails instead).
bool WriteOut(std::string_view bytes) {
  return std::fwrite(bytes.data(), 1, bytes.size(), stdout) == bytes.size() && std::fflush(stdout) == 0;
}

const char* SignalName(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    case SIGUSR1:
      return "SIGUSR1";
  }
  return "a signal";
}

// The most tokens one generate makes: 2^31 - 1. Every token is kept on the host until the
// end (GreedyContinuation's list: 4 bytes a token, up to 8 while it grows by doubling), on
// whatever device the model runs, so the list alone is 8-16 GiB there; a windowed model's
// decoding cache stays bounded, so nothing else would stop such a request before the list
// exhausts the host (a field report: --max_tokens=4294967296 --device=cuda started). The
// host memory check below counts the list too.
constexpr int64_t kMaxNewTokens = (int64_t{1} << 31) - 1;

}  // namespace

int GenerateCommand(int argc, char** argv) {
  if (auto s = ParseFlags(argc, argv,
                          "multiscreen generate (--checkpoint=DIR | --weights=W.h5) --prompt=TEXT [--max_tokens=N --threads=N --tokenizer=DIR "
                          "--train_len=T --as_learned --yarn_factor=F|auto --yarn_ramp=paper|code --sigmoid_bias_length=N|auto "
                          "--device=cpu|cuda "
                          "--precision=fp32|bf16]",
                          {"checkpoint", "weights", "prompt", "max_tokens", "train_len", "as_learned", "tokenizer",
                           "yarn_factor", "yarn_ramp", "sigmoid_bias_length", "device", "precision", "threads"}); !s.ok()) {
    return Fail("generate", s);
  }
  // CPU worker threads, as eval and bench decode take them (0: OMP_NUM_THREADS, else every core).
  if (auto s = ApplyThreadsFlag(); !s.ok()) return Fail("generate", s);
  // One process: under `mpirun -n 2` every rank decoded the same prompt.
  if (int rc = RefuseSeveralProcesses("generate"); rc != 0) return rc;
  if (absl::GetFlag(FLAGS_max_tokens) < 0 || absl::GetFlag(FLAGS_max_tokens) > kMaxNewTokens) {
    return Fail("generate", absl::InvalidArgumentError(absl::StrCat(
                                "--max_tokens=", absl::GetFlag(FLAGS_max_tokens),
                                ": expected 0 to 2^31 - 1 (every token generated is kept in host memory until the end)")));
  }
  if (const int64_t train_len = absl::GetFlag(FLAGS_train_len); train_len < 1) {
    return Fail("generate", absl::InvalidArgumentError(absl::StrCat("--train_len=", train_len, ": must be >= 1")));
  }
  // Where the decoder runs (default cpu, fp32), checked before the weights are read: no
  // CUDA, or no GPU, is one line at once. On the CPU the decoding cache is fp32's.
  const std::vector<std::string> given = GivenFlags(argc, argv);
  const std::string device_flag = absl::GetFlag(FLAGS_device), precision_flag = absl::GetFlag(FLAGS_precision);
  auto device = eval::ParseRunnerDevice(Given(given, "device") ? &device_flag : nullptr,
                                        Given(given, "precision") ? &precision_flag : nullptr, "generate");
  if (!device.ok()) return Fail("generate", device.status());
  const bool on_device = device->device != Device::kCpu;
  if (!on_device && device->precision != Precision::kFp32) {
    return Fail("generate", absl::InvalidArgumentError(
                                "--precision=bf16: on the CPU the decoding cache runs in fp32; bf16 decodes with --device=cuda"));
  }
  // A device too small for what generate puts there (a kernel table's GEMM workspace, the
  // parameters, the decoding cache): one line naming the flags, whenever it is allocated.
  constexpr const char* kAdvice = "fewer --max_tokens or a shorter --prompt, a smaller model, or --device=cpu";
  OnDeviceOutOfMemory("generate", kAdvice);
  if (auto s = eval::CheckRunnerDevice(*device); !s.ok()) return Fail("generate", s);
  auto weights = LoadWeights(absl::GetFlag(FLAGS_weights), absl::GetFlag(FLAGS_checkpoint));
  if (!weights.ok()) return Fail("generate", weights.status());
  auto yarn = eval::ParseYarnFactor(absl::GetFlag(FLAGS_yarn_factor), weights->dims);
  if (!yarn.ok()) return Fail("generate", yarn.status());
  auto yarn_ramp = eval::ParseYarnRamp(absl::GetFlag(FLAGS_yarn_ramp), *yarn);
  if (!yarn_ramp.ok()) return Fail("generate", yarn_ramp.status());
  auto sigmoid_bias = eval::ParseSigmoidBiasLength(absl::GetFlag(FLAGS_sigmoid_bias_length), weights->dims);
  if (!sigmoid_bias.ok()) return Fail("generate", sigmoid_bias.status());
  // The tokenizer and training length the run recorded (cli/run_data.h), unless given.
  const std::string run_dir = RunDirOf(absl::GetFlag(FLAGS_checkpoint));
  auto tokenizer = LoadRunTokenizer(given, run_dir);
  if (!tokenizer.ok()) return Fail("generate", tokenizer.status());
  auto prompt = (*tokenizer)->Encode(absl::GetFlag(FLAGS_prompt));
  if (!prompt.ok()) return Fail("generate", absl::InvalidArgumentError(absl::StrCat("--prompt: ", prompt.status().message())));
  if (prompt->empty()) prompt->push_back(static_cast<int32_t>(weights->dims.eos_token));
  for (int32_t id : *prompt) {
    if (id >= weights->dims.vocab) {
      return Fail("generate", absl::InvalidArgumentError(absl::StrCat("--prompt: token ", id, " is past the model's V = ",
                                                                      weights->dims.vocab, " (wrong --tokenizer?)")));
    }
  }
  if (auto s = CheckWindowFlags(*weights, absl::GetFlag(FLAGS_as_learned)); !s.ok()) return Fail("generate", s);
  InferenceOptions options;
  options.expand_windows = !absl::GetFlag(FLAGS_as_learned);
  std::string train_len_source;
  options.train_len = RunTrainLen(given, run_dir, &train_len_source);
  // The decoding cache of prompt + max_tokens positions must fit (a Transformer's keys and
  // values, and Multiscreen's infinite-window tiles, grow with every token): in host memory,
  // or on a device in its free memory (read after the parameters were uploaded).
  const int64_t positions = static_cast<int64_t>(prompt->size()) + absl::GetFlag(FLAGS_max_tokens);
  auto yarn_factor = eval::YarnFactorFor(*yarn, positions, options.train_len);
  if (!yarn_factor.ok()) return Fail("generate", yarn_factor.status());
  options.yarn_factor = *yarn_factor;
  options.yarn_ramp = *yarn_ramp;
  options.sigmoid_bias_length = eval::SigmoidBiasLengthFor(*sigmoid_bias, positions);
  // The device's copy of the parameters, up front.
  if (auto s = CheckDeviceMemory(device->device, 4 * int64_t(weights->params.size()),
                                 absl::StrCat("the parameters of ", weights->dims.name));
      !s.ok()) {
    return Fail("generate", s);
  }
  eval::ModelRunner runner(*weights, options, *device);
  if (const int64_t avail = on_device ? eval::DeviceFreeBytes() : eval::AvailableMemoryBytes(); avail > 0) {
    const int64_t need = runner.DecodeBytes(positions) + (on_device ? 0 : 8 * positions);
    if (need > avail) {
      return Fail("generate", absl::ResourceExhaustedError(absl::StrFormat(
                                  "--max_tokens=%d: the decoding cache of %d positions (prompt and new tokens) needs "
                                  "about %.2f GiB, %.2f GiB %s",
                                  absl::GetFlag(FLAGS_max_tokens), positions, double(need) / (1 << 30),
                                  double(avail) / (1 << 30), on_device ? "free on the device" : "available")));
    }
  }
  // On a device the tokens' list (8 bytes a token at most, kMaxNewTokens) is the host's.
  if (const int64_t avail = eval::AvailableMemoryBytes(); on_device && avail > 0 && 8 * positions > avail) {
    return Fail("generate", absl::ResourceExhaustedError(absl::StrFormat(
                                "--max_tokens=%d: the %d tokens (prompt and new tokens) kept on the host need about "
                                "%.2f GiB, %.2f GiB available",
                                absl::GetFlag(FLAGS_max_tokens), positions, double(8 * positions) / (1 << 30),
                                double(avail) / (1 << 30))));
  }
  // From here a stop signal ends decoding after the current token (before, the default
  // way: nothing was printed yet).
  InstallStopHandlers();
  const int64_t max_tokens = absl::GetFlag(FLAGS_max_tokens);
  absl::Status failed;
  int64_t printed = 0;
  Utf8Holdback holdback;
  auto write_failed = [&] { return absl::UnavailableError(absl::StrCat("writing stdout failed after ", printed,
                                                                       " of ", max_tokens, " tokens")); };
  if (!WriteOut(absl::GetFlag(FLAGS_prompt))) return Fail("generate", write_failed());
  runner.Greedy(*prompt, max_tokens, [&](int32_t id) {
    auto bytes = (*tokenizer)->Decode({id});
    if (!bytes.ok()) {  // a model's V past the tokenizer's
      failed = absl::InvalidArgumentError(absl::StrCat("--tokenizer: generated token ", printed, " (id ", id,
                                                       ") is not in the tokenizer's vocabulary"));
      return false;
    }
    if (!WriteOut(holdback.Push(*bytes))) {
      failed = write_failed();
      return false;
    }
    ++printed;
    return !StopRequested();
  });
  if (!WriteOut(holdback.Finish() + "\n") && failed.ok()) failed = write_failed();
  if (!failed.ok()) return Fail("generate", failed);
  if (StopRequested() && printed < max_tokens) {
    std::fprintf(stderr, "multiscreen generate: interrupted by %s after %lld of %lld tokens; printed those\n",
                 SignalName(StopSignal()), static_cast<long long>(printed), static_cast<long long>(max_tokens));
    return 128 + StopSignal();
  }
  return 0;
}

}  // namespace multiscreen::cli
