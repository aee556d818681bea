#include "parallel/progress.h"

#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <mutex>
#include <new>

#include "absl/strings/str_format.h"

namespace multiscreen::progress {
namespace {

struct Home {
  Beacon* beacon = nullptr;
  int fd = -1;
};

// The mapping lives as long as the process (the fd is what peers open); never unmapped.
Home MakeHome() {
  Home h;
  const int fd = ::memfd_create("multiscreen-progress", MFD_CLOEXEC);
  if (fd >= 0 && ::ftruncate(fd, sizeof(Beacon)) == 0) {
    void* p = ::mmap(nullptr, sizeof(Beacon), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
      h.beacon = new (p) Beacon();
      h.fd = fd;
    }
  }
  if (h.beacon == nullptr) {
    if (fd >= 0) ::close(fd);
    h.beacon = new Beacon();
  }
  h.beacon->phase_since_ns.store(MonotonicNs(), std::memory_order_relaxed);
  return h;
}

const Home& TheHome() {
  static const Home home = MakeHome();
  return home;
}

// Writers of `waiting`/`wait_since_ns`/`collective` (the main thread and the dp
// reducer's): one at a time, so that the three stay consistent for the oldest wait.
std::mutex& WaitMutex() {
  static std::mutex m;
  return m;
}

struct Verdict {
  std::mutex mutex;
  std::string line;
  std::atomic<bool> posted{false};
  std::atomic<bool> taken{false};
};
Verdict& TheVerdict() {
  static Verdict v;
  return v;
}

}  // namespace

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kStartUp: return "start-up";
    case Phase::kLoadingCheckpoint: return "loading a checkpoint";
    case Phase::kReadingData: return "reading the batch";
    case Phase::kForwardBackward: return "forward/backward";
    case Phase::kOptimizer: return "the optimizer step";
    case Phase::kValidation: return "validation";
    case Phase::kLogging: return "logging between steps";
    case Phase::kSavingCheckpoint: return "saving a checkpoint";
  }
  return "an unknown phase";
}

bool IsLongPhase(Phase phase) {
  return phase == Phase::kStartUp || phase == Phase::kLoadingCheckpoint || phase == Phase::kValidation ||
         phase == Phase::kSavingCheckpoint;
}

const char* CollectiveName(Collective op) {
  switch (op) {
    case Collective::kAllReduce: return "AllReduce";
    case Collective::kReduceScatter: return "ReduceScatter";
    case Collective::kAllGather: return "AllGather";
    case Collective::kBroadcast: return "Broadcast";
    case Collective::kSend: return "Send";
    case Collective::kRecv: return "Recv";
    case Collective::kSendRecv: return "SendRecv";
    case Collective::kBarrier: return "Barrier";
    case Collective::kCommSetUp: return "communicator set-up";
  }
  return "an unknown collective";
}

Beacon& Self() { return *TheHome().beacon; }
int SelfFd() { return TheHome().fd; }

int64_t MonotonicNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

Snapshot Read(const Beacon& b, int64_t now_ns) {
  Snapshot s;
  s.step = b.step.load(std::memory_order_relaxed);
  s.steps_here = b.steps_here.load(std::memory_order_relaxed);
  const int32_t phase = b.phase.load(std::memory_order_relaxed);
  s.phase = phase >= 0 && phase < kNumPhases ? Phase(phase) : Phase::kStartUp;
  s.phase_seconds = 1e-9 * double(now_ns - b.phase_since_ns.load(std::memory_order_relaxed));
  s.waiting = b.waiting.load(std::memory_order_acquire) > 0;
  if (s.waiting) {
    const int32_t op = b.collective.load(std::memory_order_relaxed);
    s.collective = op >= 0 && op <= int32_t(kLastCollective) ? Collective(op) : Collective::kAllReduce;
    s.wait_seconds = 1e-9 * double(now_ns - b.wait_since_ns.load(std::memory_order_relaxed));
  }
  return s;
}

std::string Describe(const Snapshot& s, bool with_wait) {
  // The trainer's step counts completed steps: reading, forward/backward and the
  // optimizer belong to the next one; the rest happens after a step (or before the first).
  const bool in_step = s.phase == Phase::kReadingData || s.phase == Phase::kForwardBackward || s.phase == Phase::kOptimizer;
  std::string out = in_step                        ? absl::StrFormat("step %d, %s", s.step + 1, PhaseName(s.phase))
                    : s.phase == Phase::kStartUp ? std::string(PhaseName(s.phase))
                                                   : absl::StrFormat("%s after step %d", PhaseName(s.phase), s.step);
  absl::StrAppendFormat(&out, " for %.1f s", s.phase_seconds);
  if (s.waiting && with_wait) absl::StrAppendFormat(&out, ", waiting in %s for %.1f s", CollectiveName(s.collective), s.wait_seconds);
  return out;
}

void SetStep(int64_t step, int64_t steps_here) {
  Beacon& b = Self();
  b.step.store(step, std::memory_order_relaxed);
  b.steps_here.store(steps_here, std::memory_order_relaxed);
}

void SetPhase(Phase phase) {
  Beacon& b = Self();
  if (b.phase.load(std::memory_order_relaxed) == int32_t(phase)) return;
  b.phase_since_ns.store(MonotonicNs(), std::memory_order_relaxed);
  b.phase.store(int32_t(phase), std::memory_order_relaxed);
}

namespace {
std::atomic<int> verdict_takers{0};
}  // namespace

CollectiveWait::CollectiveWait(Collective op, bool takes_verdict) : takes_verdict_(takes_verdict) {
  if (takes_verdict_) verdict_takers.fetch_add(1);
  Beacon& b = Self();
  std::lock_guard<std::mutex> lock(WaitMutex());
  if (b.waiting.load(std::memory_order_relaxed) == 0) {
    b.collective.store(int32_t(op), std::memory_order_relaxed);
    b.wait_since_ns.store(MonotonicNs(), std::memory_order_relaxed);
  }
  b.waiting.fetch_add(1, std::memory_order_release);
}

CollectiveWait::~CollectiveWait() {
  {
    std::lock_guard<std::mutex> lock(WaitMutex());
    Self().waiting.fetch_sub(1, std::memory_order_release);
  }
  if (takes_verdict_) verdict_takers.fetch_sub(1);
}

bool VerdictTakerWaiting() { return verdict_takers.load() > 0; }

namespace {
std::atomic<double> watchdog_limit{0};
}  // namespace

void SetWatchdogLimit(double seconds) { watchdog_limit.store(seconds); }
double WatchdogLimit() { return watchdog_limit.load(); }

void PostVerdict(const std::string& line) {
  Verdict& v = TheVerdict();
  std::lock_guard<std::mutex> lock(v.mutex);
  if (v.posted.load()) return;
  v.line = line;
  v.posted.store(true, std::memory_order_release);
}

const std::string* TakeVerdict() {
  Verdict& v = TheVerdict();
  if (!v.posted.load(std::memory_order_acquire)) return nullptr;
  std::lock_guard<std::mutex> lock(v.mutex);
  if (!v.posted.load()) return nullptr;
  v.taken.store(true);
  return &v.line;
}

bool WithdrawVerdict() {
  Verdict& v = TheVerdict();
  std::lock_guard<std::mutex> lock(v.mutex);
  if (v.taken.load()) return false;
  v.posted.store(false);
  return true;
}

bool VerdictTaken() { return TheVerdict().taken.load(); }

}  // namespace multiscreen::progress
