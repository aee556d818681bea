// The emulated device's work accounting (emulator.h, "Work accounting"): one table of
// calls and threads by name, behind a mutex, for tests that count what a call launched.
#include <map>
#include <mutex>
#include <string>

#include "cuda_emulator/emulator.h"

namespace msemu {
namespace {

std::mutex g_tally_mutex;

std::map<std::string, WorkTally>& Tallies() {
  static auto* tallies = new std::map<std::string, WorkTally>;  // never destroyed: launches may outlive main's statics
  return *tallies;
}

}  // namespace

std::map<std::string, WorkTally> WorkTallies() {
  std::lock_guard lock(g_tally_mutex);
  return Tallies();
}

void CountWork(const std::string& name, uint64_t threads, uint64_t bytes, uint64_t to_host) {
  std::lock_guard lock(g_tally_mutex);
  WorkTally& t = Tallies()[name];
  ++t.calls;
  t.threads += threads;
  t.bytes += bytes;
  t.bytes_to_host += to_host;
}

}  // namespace msemu
