// What this process is doing, published for the collective watchdog
// (parallel/collective_watchdog.h), so that a job whose ranks wait for one that never
// arrives can say which rank, where it is, and what it last did (issue 31 §2).
//
// The beacon is a few atomics in a memfd mapping: the process writes it (the trainer its
// step and phase, the communicators each wait in a collective), its own watchdog thread
// reads it to answer a peer's inquiry, and a watchdog on the same node reads it through
// /proc/<pid>/fd/<fd> when this process cannot answer (stopped by SIGSTOP or a debugger).
// Durations are measured on CLOCK_MONOTONIC, the same clock for every process of a host.
// Writes are a clock read and a few relaxed atomic stores: cheap enough for every
// collective.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace multiscreen::progress {

// Where a process is in a run (the trainer sets it).
enum class Phase : int32_t {
  kStartUp = 0,        // from process start to the first step (data, grid, NCCL, resume)
  kLoadingCheckpoint,  // reading and agreeing on the checkpoint to resume
  kReadingData,        // the step's batch from the data loader
  kForwardBackward,    // forward, backward and their collectives, the gradient norm
  kOptimizer,          // AdamW, and ZeRO-1's parameter all-gather
  kValidation,         // a validation pass
  kLogging,            // metrics, status and the stop-signal agreement between steps
  kSavingCheckpoint,   // writing a checkpoint, and the barriers around it
};
constexpr int kNumPhases = 8;
// "forward/backward", "saving a checkpoint", ...
const char* PhaseName(Phase phase);
// Whether a wait in this phase gets the long limit (start-up, checkpoints, validation:
// one rank may legitimately work alone for long while its peers wait).
bool IsLongPhase(Phase phase);

// The collective operation a thread waits in (kCommSetUp: MPI_Comm_dup or a split, which
// wait for every rank of the group too).
enum class Collective : int32_t {
  kAllReduce = 0, kReduceScatter, kAllGather, kBroadcast, kSend, kRecv, kSendRecv, kBarrier, kCommSetUp
};
constexpr Collective kLastCollective = Collective::kCommSetUp;
const char* CollectiveName(Collective op);

// The shared state (in the memfd mapping; lock-free atomics, so a reader in another
// process sees whole values).
struct Beacon {
  std::atomic<int64_t> step{0};             // steps completed (the trainer's state step)
  std::atomic<int64_t> steps_here{0};       // steps this process has run (0: the first is under way)
  std::atomic<int32_t> phase{0};            // Phase
  std::atomic<int64_t> phase_since_ns{0};   // CLOCK_MONOTONIC at the phase's start
  std::atomic<int32_t> waiting{0};          // threads in a collective now
  std::atomic<int32_t> collective{0};       // Collective of the oldest wait
  std::atomic<int64_t> wait_since_ns{0};    // CLOCK_MONOTONIC when `waiting` went 0 → 1
};
static_assert(std::atomic<int64_t>::is_always_lock_free && std::atomic<int32_t>::is_always_lock_free);

// A reading of a beacon, with its durations in seconds (so that it means the same on
// another host).
struct Snapshot {
  int64_t step = 0;
  int64_t steps_here = 0;
  Phase phase = Phase::kStartUp;
  double phase_seconds = 0;
  bool waiting = false;
  Collective collective = Collective::kAllReduce;
  double wait_seconds = 0;
};

// This process's beacon (created on first use; a heap copy where memfd_create fails).
Beacon& Self();
// The memfd that holds Self(), −1 when it is on the heap.
int SelfFd();
// Reads `beacon` now (`now_ns`: CLOCK_MONOTONIC).
Snapshot Read(const Beacon& beacon, int64_t now_ns);
int64_t MonotonicNs();
// "step 11, forward/backward for 3.2 s", "saving a checkpoint after step 10 for 2.0 s"
// (the step under way is one past the steps completed), and when waiting
// ", waiting in AllReduce for 61.0 s".
// `with_wait`: false leaves the waiting part out.
std::string Describe(const Snapshot& s, bool with_wait = true);

// The trainer's marks.
void SetStep(int64_t step, int64_t steps_here);
void SetPhase(Phase phase);

// Marks this thread as waiting in a collective for its lifetime (nested scopes and
// several threads count once: the oldest wait is the one timed).
class CollectiveWait {
 public:
  // `takes_verdict`: the waiter polls TakeVerdict and ends the job itself (NCCL);
  // otherwise (a blocking MPI call) the watchdog ends it at once.
  explicit CollectiveWait(Collective op, bool takes_verdict = false);
  ~CollectiveWait();
  CollectiveWait(const CollectiveWait&) = delete;
  CollectiveWait& operator=(const CollectiveWait&) = delete;

 private:
  bool takes_verdict_;
};

// The longest wait the collective watchdog allows (its limit for long phases), set when
// it starts; 0 while none runs. A communicator's own operation timeout stays above it,
// so that the watchdog, which names the missing rank, speaks first.
void SetWatchdogLimit(double seconds);
double WatchdogLimit();

// The watchdog's verdict handed to a waiter that can abandon its wait cleanly (the NCCL
// communicator polls TakeVerdict and aborts its communicator before ending the job with
// the line). The watchdog ends the job itself when no waiter takes it, or withdraws it
// when the wait completed.
void PostVerdict(const std::string& line);
// The posted verdict (marking it taken), or nullptr when none was posted.
const std::string* TakeVerdict();
// Whether a waiter took the posted verdict.
bool VerdictTaken();
// Takes back a posted verdict no waiter took (its wait completed after all); false when
// one took it meanwhile.
bool WithdrawVerdict();
// Whether a thread of this process now waits in a collective that takes the verdict.
bool VerdictTakerWaiting();

}  // namespace multiscreen::progress
