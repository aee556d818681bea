// `bench train --op_times` (bench_op_times.h).
#include "cli/bench_op_times.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#ifdef MULTISCREEN_HAVE_CUDA
#include "kernels/cuda/kernel_times.h"
#endif

namespace multiscreen::cli {

bool CanTimeDeviceOps() {
#ifdef MULTISCREEN_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

void BeginOpTimes() {
#ifdef MULTISCREEN_HAVE_CUDA
  kernels::cuda::KernelTimesStart();
#endif
}

absl::StatusOr<nlohmann::json> EndOpTimes() {
  nlohmann::json out = {{"unit", "ms"}, {"ops", nlohmann::json::array()}, {"total_ms", 0.0}};
#ifdef MULTISCREEN_HAVE_CUDA
  auto times = kernels::cuda::KernelTimesStop();
  if (!times.ok()) return times.status();
  double total = 0;
  for (const kernels::cuda::KernelTime& t : *times) {
    // Library products are named by their function ("cublasLtMatmul 64x256x64 ..."), kernels
    // by their kernel and source file (kernel_name.h).
    const bool library = t.name.rfind("cublas", 0) == 0;
    out["ops"].push_back({{"name", t.name}, {"kind", library ? "library" : "kernel"}, {"calls", t.calls}, {"ms", t.ms}});
    total += t.ms;
  }
  out["total_ms"] = total;
#endif
  return out;
}

void PrintOpTimes(const nlohmann::json& times) {
  std::vector<const nlohmann::json*> rows;
  for (const nlohmann::json& r : times["ops"]) rows.push_back(&r);
  std::stable_sort(rows.begin(), rows.end(),
                   [](const nlohmann::json* a, const nlohmann::json* b) { return (*a)["ms"] > (*b)["ms"]; });
  std::printf("device time per kernel and product, one step (CUDA events around each call):\n");
  std::printf("  %10s %8s %6s  %s\n", "ms", "calls", "share", "name");
  const double total = times["total_ms"].get<double>();
  for (const nlohmann::json* r : rows) {
    const double ms = (*r)["ms"].get<double>();
    std::printf("  %10.3f %8lld %5.1f%%  %s\n", ms, (long long)(*r)["calls"].get<int64_t>(),
                total > 0 ? 100.0 * ms / total : 0.0, (*r)["name"].get<std::string>().c_str());
  }
  std::printf("  %10.3f %8s %6s  total\n", total, "", "");
}

}  // namespace multiscreen::cli
