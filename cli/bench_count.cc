// `bench train --count` (bench_count.h): the emulated device's work tally between two
// snapshots, as JSON and as a text table.
#include "cli/bench_count.h"

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#ifdef MULTISCREEN_CUDA_EMULATED
#include "cuda_emulator/emulator.h"
#endif

namespace multiscreen::cli {
namespace {

// The kernel's name without the namespaces every kernel of kernels/cuda shares.
std::string ShortName(std::string name) {
  for (const std::string prefix : {"multiscreen::kernels::cuda::", "(anonymous namespace)::", "{anonymous}::"}) {
    for (size_t at = name.find(prefix); at != std::string::npos; at = name.find(prefix)) name.erase(at, prefix.size());
  }
  return name;
}

#ifdef MULTISCREEN_CUDA_EMULATED
// The counted fields, in the table's order (JSON keys; "name" and "kind" apart).
constexpr const char* kFields[] = {"calls",    "threads",   "bytes_read", "bytes_written", "gemm_mnk",
                                   "gemm_flops", "mma",     "mma_flops",  "ldmatrix",      "cp_async",
                                   "syncs",    "bytes_to_host", "bytes_to_device", "graph_nodes"};

std::map<std::string, msemu::WorkTally>& Before() {
  static auto* before = new std::map<std::string, msemu::WorkTally>;
  return *before;
}

const char* KindName(msemu::WorkKind kind) {
  switch (kind) {
    case msemu::WorkKind::kKernel: return "kernel";
    case msemu::WorkKind::kLibrary: return "library";
    case msemu::WorkKind::kCopy: return "copy";
    case msemu::WorkKind::kMemset: return "memset";
    case msemu::WorkKind::kSync: return "sync";
    case msemu::WorkKind::kGraph: return "graph";
  }
  return "?";
}
#endif

}  // namespace

#ifdef MULTISCREEN_CUDA_EMULATED
bool CanCountDeviceWork() { return true; }

void BeginDeviceCount() {
  msemu::SetCounting(true);
  Before() = msemu::WorkTallies();
}

nlohmann::json EndDeviceCount() {
  const auto work = msemu::WorkBetween(Before(), msemu::WorkTallies());
  msemu::SetCounting(false);
  constexpr uint64_t kMmaFlops = 2 * 16 * 8 * 16;  // m16n8k16
  nlohmann::json ops = nlohmann::json::array(), totals = nlohmann::json::object();
  for (const char* f : kFields) totals[f] = uint64_t{0};
  for (int kind = 0; kind <= int(msemu::WorkKind::kGraph); ++kind) {
    for (const auto& [name, t] : work) {
      if (int(t.kind) != kind) continue;
      nlohmann::json row = {{"name", name},
                            {"kind", KindName(t.kind)},
                            {"calls", t.calls},
                            {"threads", t.threads},
                            {"bytes_read", t.bytes_read},
                            {"bytes_written", t.bytes_written},
                            {"gemm_mnk", t.gemm_mnk},
                            {"gemm_flops", 2 * t.gemm_mnk},
                            {"mma", t.mma},
                            {"mma_flops", kMmaFlops * t.mma},
                            {"ldmatrix", t.ldmatrix},
                            {"cp_async", t.cp_async},
                            {"syncs", t.syncs},
                            {"bytes_to_host", t.bytes_to_host},
                            {"bytes_to_device", t.bytes_to_device},
                            {"graph_nodes", t.graph_nodes}};
      for (const char* f : kFields) totals[f] = totals[f].get<uint64_t>() + row[f].get<uint64_t>();
      ops.push_back(std::move(row));
    }
  }
  return {{"granularity_bytes", 32}, {"ops", ops}, {"totals", totals}};
}
#else
bool CanCountDeviceWork() { return false; }
void BeginDeviceCount() {}
nlohmann::json EndDeviceCount() { return nlohmann::json::object(); }
#endif

void PrintDeviceCount(const nlohmann::json& counted) {
  std::printf("  counted on the emulated device (one step; global memory in %d-byte sectors, once per call):\n",
              counted.value("granularity_bytes", 32));
  std::printf("  %7s %11s %13s %13s %13s %9s %9s %9s %5s %9s %9s %7s  %s\n", "calls", "threads", "bytes read",
              "bytes written", "GEMM m*n*k", "mma.sync", "ldmatrix", "cp.async", "syncs", "to host", "to device",
              "in graph", "op");
  auto row = [](const nlohmann::json& r, const std::string& name) {
    auto u = [&](const char* f) { return static_cast<unsigned long long>(r[f].get<uint64_t>()); };
    std::printf("  %7llu %11llu %13llu %13llu %13llu %9llu %9llu %9llu %5llu %9llu %9llu %7llu  %s\n", u("calls"),
                u("threads"), u("bytes_read"), u("bytes_written"), u("gemm_mnk"), u("mma"), u("ldmatrix"),
                u("cp_async"), u("syncs"), u("bytes_to_host"), u("bytes_to_device"), u("graph_nodes"), name.c_str());
  };
  for (const nlohmann::json& r : counted["ops"]) {
    row(r, r["kind"].get<std::string>() == "kernel" ? ShortName(r["name"].get<std::string>())
                                                    : r["name"].get<std::string>());
  }
  row(counted["totals"], "total");
}

}  // namespace multiscreen::cli
