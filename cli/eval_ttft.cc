// `multiscreen eval ttft`: time to first token, the median of --repeats timed prefills of
// --context random tokens (batch 1) after --warmup untimed ones, on the CPU or a GPU.
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
#include "cli/device.h"
#include "cli/eval_common.h"
#include "cli/flags.h"
#include "common/text_file.h"
#include "eval/python_random.h"

ABSL_FLAG(int64_t, context, 4096, "eval ttft: prompt tokens");
ABSL_FLAG(int64_t, repeats, 5, "eval ttft: timed prefills");

namespace multiscreen::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = EvalClock;

}  // namespace

int EvalTtft(const std::vector<std::string>& given) {
  const int64_t N = absl::GetFlag(FLAGS_context), repeats = absl::GetFlag(FLAGS_repeats), warmup = absl::GetFlag(FLAGS_warmup);
  for (const auto& [name, value, least] : {std::tuple<const char*, int64_t, int64_t>{"context", N, 1},
                                           {"repeats", repeats, 1}, {"warmup", warmup, 0}}) {
    if (value < least) {
      return Fail("eval ttft", absl::InvalidArgumentError(absl::StrCat("--", name, "=", value, ": must be >= ", least)));
    }
  }
  auto setup = Setup(given, false);
  if (!setup.ok()) return Fail("eval ttft", setup.status());
  if (auto s = setup->UseScalingFor(N); !s.ok()) return Fail("eval ttft", s);
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


}  // namespace multiscreen::cli
