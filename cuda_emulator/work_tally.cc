// The emulated device's work accounting (emulator.h, "Work accounting"): one table of
// what ran, by name, behind a mutex; and the switch and stamps of sector counting.
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "cuda_emulator/emulator.h"
#include "cuda_emulator/internal.h"

namespace msemu {
namespace {

std::mutex g_tally_mutex;

std::map<std::string, WorkTally>& Tallies() {
  static auto* tallies = new std::map<std::string, WorkTally>;  // never destroyed: launches may outlive main's statics
  return *tallies;
}

std::atomic<bool>& CountingFlag() {
  static std::atomic<bool> on = [] {
    const char* v = std::getenv("MULTISCREEN_EMULATOR_COUNT");
    return v != nullptr && std::string(v) == "1";
  }();
  return on;
}

std::atomic<uint32_t> g_stamp{0};

void Add(WorkTally& t, const WorkTally& w) {
  t.kind = w.kind;
  t.calls += w.calls;
  t.threads += w.threads;
  t.bytes += w.bytes;
  t.bytes_to_host += w.bytes_to_host;
  t.bytes_to_device += w.bytes_to_device;
  t.syncs += w.syncs;
  t.gemm_mnk += w.gemm_mnk;
  t.mma += w.mma;
  t.ldmatrix += w.ldmatrix;
  t.cp_async += w.cp_async;
  t.graph_nodes += w.graph_nodes;
  t.bytes_read += w.bytes_read;
  t.bytes_written += w.bytes_written;
}

}  // namespace

thread_local CallCounts* t_counts = nullptr;
thread_local int t_graph_replays = 0;

std::map<std::string, WorkTally> WorkTallies() {
  std::lock_guard lock(g_tally_mutex);
  return Tallies();
}

void AddWork(const std::string& name, const WorkTally& work) {
  WorkTally w = work;
  if (t_graph_replays > 0) w.graph_nodes = w.calls;
  std::lock_guard lock(g_tally_mutex);
  Add(Tallies()[name], w);
}

std::map<std::string, WorkTally> WorkBetween(const std::map<std::string, WorkTally>& before,
                                             const std::map<std::string, WorkTally>& after) {
  std::map<std::string, WorkTally> out;
  for (const auto& [name, a] : after) {
    WorkTally d = a;
    if (auto it = before.find(name); it != before.end()) {
      const WorkTally& b = it->second;
      d.calls -= b.calls;
      d.threads -= b.threads;
      d.bytes -= b.bytes;
      d.bytes_to_host -= b.bytes_to_host;
      d.bytes_to_device -= b.bytes_to_device;
      d.syncs -= b.syncs;
      d.gemm_mnk -= b.gemm_mnk;
      d.mma -= b.mma;
      d.ldmatrix -= b.ldmatrix;
      d.cp_async -= b.cp_async;
      d.graph_nodes -= b.graph_nodes;
      d.bytes_read -= b.bytes_read;
      d.bytes_written -= b.bytes_written;
    }
    if (d.calls > 0) out.emplace(name, d);
  }
  return out;
}

void SetCounting(bool on) {
  if (on) EnableSectorMarks();
  CountingFlag().store(on);
}

bool Counting() { return CountingFlag().load(std::memory_order_relaxed); }

uint32_t NextCountStamp() {
  if (!Counting()) return 0;
  // 30 bits of stamp beside the two flags; 0 means "counting off", so it is skipped.
  uint32_t s = (g_stamp.fetch_add(1, std::memory_order_relaxed) + 1) & 0x3fffffffu;
  return s == 0 ? 1 : s;
}

}  // namespace msemu
