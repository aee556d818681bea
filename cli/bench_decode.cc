// `multiscreen bench decode`: the decoders (model/decoder.h) on a prompt of random tokens,
// fed token by token against fed in --feed_rows-token chunks, then greedy decoding.
// See cli/bench_decode.h.
#include "cli/bench_decode.h"

#include <omp.h>

#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "cli/bench_timing.h"
#include "cli/device_memory.h"
#include "cli/flags.h"
#include "cli/run_data.h"
#include "cli/weights_source.h"
#include "eval/model_runner.h"
#include "kernels/cpu/isa.h"
#include "kernels/device_array.h"
#include "model/decoder.h"
#include "model/init.h"
#include "model/param_layout.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(int64_t, prompt_tokens, 4096, "bench decode: random prompt tokens fed before the first greedy token");
ABSL_FLAG(int64_t, new_tokens, 32, "bench decode: greedy tokens decoded after the prompt");
ABSL_FLAG(int64_t, feed_rows, multiscreen::Decoder<float>::kFeedRows,
          "bench decode: tokens of a prompt chunk through the layers' GEMMs");
ABSL_DECLARE_FLAG(std::string, weights);     // forward_command.cc
ABSL_DECLARE_FLAG(std::string, checkpoint);  // forward_command.cc
ABSL_DECLARE_FLAG(std::string, device);      // device.cc
ABSL_DECLARE_FLAG(bool, json);               // params_command.cc

namespace multiscreen::cli {

namespace {

constexpr int kRuns = 3;  // each time is the median of this many runs

}  // namespace

int BenchDecode(int argc, char** argv) {
  constexpr const char* kCommand = "bench decode";
  if (auto s = ParseFlags(argc, argv,
                          "multiscreen bench decode [--model=psi8 | --weights=W.h5 | --checkpoint=DIR] [--prompt_tokens=N "
                          "--new_tokens=M --feed_rows=R --device=cpu|cuda --precision=fp32|bf16 --threads=N --seed=S --json]",
                          {"model", "weights", "checkpoint", "prompt_tokens", "new_tokens", "feed_rows", "device",
                           "precision", "threads", "seed", "json"});
      !s.ok()) {
    return Fail(kCommand, s);
  }
  if (auto s = ApplyThreadsFlag(); !s.ok()) return Fail(kCommand, s);
  const int64_t prompt_tokens = absl::GetFlag(FLAGS_prompt_tokens), new_tokens = absl::GetFlag(FLAGS_new_tokens);
  // The caches grow with the tokens (an infinite window's, without bound); 2^24 is past
  // any context the paper evaluates and keeps the token vectors small.
  constexpr int64_t kMaxTokens = int64_t{1} << 24;
  if (prompt_tokens < 1 || prompt_tokens > kMaxTokens) {
    return Fail(kCommand, absl::InvalidArgumentError(
                              absl::StrCat("--prompt_tokens=", prompt_tokens, ": expected 1 to 2^24")));
  }
  if (new_tokens < 0 || new_tokens > kMaxTokens) {
    return Fail(kCommand,
                absl::InvalidArgumentError(absl::StrCat("--new_tokens=", new_tokens, ": expected 0 to 2^24")));
  }
  const int64_t feed_rows = absl::GetFlag(FLAGS_feed_rows);
  if (feed_rows < 1 || feed_rows > kMaxTokens) {
    return Fail(kCommand, absl::InvalidArgumentError(absl::StrCat("--feed_rows=", feed_rows, ": expected 1 to 2^24")));
  }
  const std::vector<std::string> given = GivenFlags(argc, argv);
  const std::string device_flag = absl::GetFlag(FLAGS_device), precision_flag = absl::GetFlag(FLAGS_precision);
  auto device = eval::ParseRunnerDevice(Given(given, "device") ? &device_flag : nullptr,
                                        Given(given, "precision") ? &precision_flag : nullptr, kCommand);
  if (!device.ok()) return Fail(kCommand, device.status());
  if (device->device == Device::kCpu && device->precision != Precision::kFp32) {  // as generate and eval
    return Fail(kCommand, absl::InvalidArgumentError(
                              "--precision=bf16: on the CPU the decoding cache runs in fp32; bf16 decodes with --device=cuda"));
  }
  if (Given(given, "model") && (Given(given, "weights") || Given(given, "checkpoint"))) {
    return Fail(kCommand, absl::InvalidArgumentError(absl::StrCat(
                              "--model=", absl::GetFlag(FLAGS_model), " and --", Given(given, "weights") ? "weights" : "checkpoint",
                              ": give one (the weights name their model)")));
  }
  if (auto s = eval::CheckRunnerDevice(*device); !s.ok()) return Fail(kCommand, s);
  OnDeviceOutOfMemory(kCommand, "fewer --prompt_tokens or --new_tokens, a smaller model, or --device=cpu");

  // The weights: a file or checkpoint, else the model's initialization.
  Weights weights;
  std::string source;
  if (Given(given, "weights") || Given(given, "checkpoint")) {
    auto loaded = LoadWeights(absl::GetFlag(FLAGS_weights), absl::GetFlag(FLAGS_checkpoint));
    if (!loaded.ok()) return Fail(kCommand, loaded.status());
    weights = std::move(*loaded);
    source = Given(given, "weights") ? absl::GetFlag(FLAGS_weights) : absl::GetFlag(FLAGS_checkpoint);
  } else {
    auto dims = LoadModel(absl::GetFlag(FLAGS_model));
    if (!dims.ok()) return Fail(kCommand, dims.status());
    weights.dims = *dims;
    const ParamLayout layout(weights.dims, ShardSpec::Full(weights.dims));
    weights.params.resize(layout.size());
    InitParams(layout, static_cast<uint64_t>(absl::GetFlag(FLAGS_seed)), weights.params.data());
    source = absl::StrCat(absl::GetFlag(FLAGS_model), " initialized, seed ", absl::GetFlag(FLAGS_seed));
  }
  const ModelDims& dims = weights.dims;
  DeviceArray<float> params(device->device);
  params.Resize(static_cast<int64_t>(weights.params.size()));
  params.CopyFromHost(weights.params.data());
  ModelOptions placement;
  placement.device = device->device;
  placement.precision = device->precision;
  // Windows longer than the training length expanded, as generate: a run's recorded
  // length (--checkpoint), else 4096.
  InferenceOptions options;
  std::string train_len_source;
  options.train_len =
      RunTrainLen(given, Given(given, "checkpoint") ? RunDirOf(absl::GetFlag(FLAGS_checkpoint)) : "", &train_len_source);

  std::mt19937_64 rng(static_cast<uint64_t>(absl::GetFlag(FLAGS_seed)) + 1);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(dims.vocab - 1));
  std::vector<int32_t> prompt(prompt_tokens);
  for (int32_t& id : prompt) id = token(rng);
  const int64_t fed = prompt_tokens - 1;

  // The first greedy token after the prompt, fed either way, on a fresh decoder.
  int32_t first[2] = {-1, -1};
  auto first_token = [&](bool chunked) {
    auto decoder = MakeDecoder<float>(dims, params.data(), options, placement);
    decoder->set_feed_rows(feed_rows);
    const auto start = BenchClock::now();
    if (chunked) {
      decoder->Feed(prompt.data(), fed);
    } else {
      for (int64_t i = 0; i < fed; ++i) decoder->Feed(prompt[i]);
    }
    decoder->Step(prompt.back(), nullptr);
    first[chunked] = decoder->Argmax();
    return SecondsSince(start);
  };
  double seconds[2];
  for (bool chunked : {false, true}) {
    std::vector<double> runs;
    for (int r = 0; r < kRuns; ++r) runs.push_back(first_token(chunked));
    seconds[chunked] = Median(runs);
  }
  // Greedy tokens after the chunked prompt (not timed: the prompt).
  std::vector<double> decode_runs;
  for (int r = 0; r < kRuns && new_tokens > 0; ++r) {
    auto decoder = MakeDecoder<float>(dims, params.data(), options, placement);
    decoder->set_feed_rows(feed_rows);
    decoder->Feed(prompt.data(), fed);
    decoder->Step(prompt.back(), nullptr);
    int32_t next = decoder->Argmax();
    const auto start = BenchClock::now();
    for (int64_t i = 0; i < new_tokens; ++i) {
      decoder->Step(next, nullptr);
      next = decoder->Argmax();
    }
    decode_runs.push_back(SecondsSince(start));
  }
  const double decode = Median(decode_runs);  // 0 without new tokens

  const double ratio = seconds[0] / seconds[1];
  const int threads = omp_get_max_threads();
  const std::string where = absl::StrCat(DeviceName(device->device), " ", eval::PrecisionName(device->precision));
  if (absl::GetFlag(FLAGS_json)) {
    nlohmann::json j = {{"command", "bench decode"},
                        {"model", dims.name},
                        {"weights", source},
                        {"device", DeviceName(device->device)},
                        {"precision", eval::PrecisionName(device->precision)},
                        {"threads", threads},
                        {"cpu", kernels::cpu::CpuModel()},
                        {"cpu_best_isa", kernels::cpu::IsaName(kernels::cpu::CpuIsa())},
                        {"prompt_tokens", prompt_tokens},
                        {"train_len", options.train_len},
                        {"feed_rows", feed_rows},
                        {"first_token_seconds_token_by_token", seconds[0]},
                        {"first_token_seconds_chunked", seconds[1]},
                        {"chunked_speedup", ratio},
                        {"first_token_agrees", first[0] == first[1]},
                        {"new_tokens", new_tokens},
                        {"decode_seconds", decode},
                        {"decode_tokens_per_second", decode > 0 ? double(new_tokens) / decode : 0.0}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("bench decode: %s (%s), %s, prompt of %lld random tokens, train_len %lld, %d threads, median of %d runs\n",
              dims.name.c_str(), source.c_str(), where.c_str(), (long long)prompt_tokens, (long long)options.train_len,
              threads, kRuns);
  std::printf("  CPU: %s\n", kernels::cpu::IsaDescription().c_str());
  std::printf("  first token, prompt fed token by token  %10.3f s  %10.1f prompt tokens/s\n", seconds[0],
              double(prompt_tokens) / seconds[0]);
  std::printf("  first token, prompt fed in %lld-token chunks %6.3f s  %10.1f prompt tokens/s  (%.2fx)%s\n",
              (long long)feed_rows, seconds[1], double(prompt_tokens) / seconds[1], ratio,
              first[0] == first[1] ? "" : "  (the first tokens differ: a near tie)");
  if (new_tokens > 0) {
    std::printf("  greedy decoding: %lld tokens in %.3f s, %.1f tokens/s\n", (long long)new_tokens, decode,
                double(new_tokens) / decode);
  }
  return 0;
}

}  // namespace multiscreen::cli
