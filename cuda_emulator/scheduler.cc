// Kernel execution on the emulated device (device.h): a launch's blocks run one after
// another on the calling host thread; a block's threads are fibers (Boost.Context's
// fcontext, each on its own stack with a guard page) that run until they reach
// __syncthreads, a warp collective, or their end. When every thread of the block is
// waiting or done, the scheduler releases what can be released: a warp collective
// whose mask's lanes have all arrived (computed in lockstep from their posted values),
// else the block barrier once every thread waits at it. Nothing releasable is a
// report: a __syncthreads or a warp lane that some thread never reaches.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <boost/context/detail/fcontext.hpp>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda_emulator/device.h"
#include "cuda_emulator/emulator.h"
#include "cuda_emulator/internal.h"

namespace msemu {

thread_local ThreadState* t_thread = nullptr;
thread_local BlockState* t_block = nullptr;
thread_local bool t_checking = false;

namespace {

namespace bc = boost::context::detail;

constexpr size_t kStackBytes = size_t(256) << 10;  // per emulated thread, plus a guard page (GPUs: 512 KiB)
constexpr size_t kGuardBytes = 4096;
constexpr int kMaxThreadsPerBlock = 1024;
constexpr size_t kStaticSharedLimit = size_t(48) << 10;
constexpr size_t kOptInSharedLimit = size_t(227) << 10;

enum class Status { kRunnable, kBarrier, kWarp, kDone, kKilled };

struct Fiber {
  bc::fcontext_t context = nullptr;
  ThreadState state;
  Status status = Status::kRunnable;
  const char* site = nullptr;  // the __syncthreads call it waits at, "file:line"
  WarpOp op = WarpOp::kSync;
  unsigned mask = 0;
  uint64_t value = 0, result = 0;
  int arg = 0, width = 32;
  WarpCombine combine = nullptr;  // kCombine: the function, its name, and the lane's data
  const char* combine_name = nullptr;
  void* data = nullptr;
};

// One per host thread that launches kernels.
struct Scheduler {
  char* stacks = nullptr;  // kMaxThreadsPerBlock × (guard page + kStackBytes), mapped once
  bc::fcontext_t back = nullptr;  // the scheduler, while a fiber runs
  void (*entry)(const void*) = nullptr;
  const void* params = nullptr;
  std::vector<Fiber> fibers;
  BlockState block;
  std::vector<char> dynamic_shared;
  cudaError_t error = cudaSuccess;  // of the running launch
  Fiber* running = nullptr;

  Scheduler() {
    InstallStackOverflowReport();
    const size_t each = kStackBytes + kGuardBytes, total = each * kMaxThreadsPerBlock;
    void* region = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (region == MAP_FAILED) {
      std::fprintf(stderr, "cuda emulator: cannot map %zu bytes of fiber stacks\n", total);
      std::_Exit(86);
    }
    stacks = static_cast<char*>(region);
    for (int i = 0; i < kMaxThreadsPerBlock; ++i) mprotect(stacks + i * each, kGuardBytes, PROT_NONE);
  }
  char* StackLo(int i) const { return stacks + i * (kStackBytes + kGuardBytes) + kGuardBytes; }
  // True when p is in a fiber stack's guard page.
  bool InGuard(uintptr_t p) const {
    const uintptr_t base = reinterpret_cast<uintptr_t>(stacks), each = kStackBytes + kGuardBytes;
    return stacks != nullptr && p >= base && p < base + each * kMaxThreadsPerBlock && (p - base) % each < kGuardBytes;
  }
  static void InstallStackOverflowReport();
};

thread_local Scheduler* t_scheduler = nullptr;

// A kernel thread that overflows its stack faults in the guard page below it: said in
// one line (which kernel, block and thread) instead of a bare SIGSEGV. Other faults go
// to the handler that was there before.
struct sigaction g_previous_segv;

void OnSegv(int sig, siginfo_t* info, void* context) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(info->si_addr);
  if (t_scheduler != nullptr && t_scheduler->InGuard(p)) {
    const std::string line = Format("cuda emulator: stack overflow: %s used more than the emulator's %zu KiB of local "
                                    "memory per thread (a GPU allows up to 512 KiB)\n",
                                    WhereNow().c_str(), kStackBytes >> 10);
    (void)!::write(2, line.data(), line.size());
    std::_Exit(86);
  }
  if (g_previous_segv.sa_flags & SA_SIGINFO) {
    if (g_previous_segv.sa_sigaction != nullptr) return g_previous_segv.sa_sigaction(sig, info, context);
  } else if (g_previous_segv.sa_handler != SIG_DFL && g_previous_segv.sa_handler != SIG_IGN) {
    return g_previous_segv.sa_handler(sig);
  }
  ::signal(SIGSEGV, SIG_DFL);  // the fault repeats and ends the process as it would have
}

void Scheduler::InstallStackOverflowReport() {
  // The handler runs on a stack of its own (the faulting one is exhausted), per thread.
  static thread_local std::vector<char> alternate(size_t(64) << 10);
  stack_t ss{};
  ss.ss_sp = alternate.data();
  ss.ss_size = alternate.size();
  sigaltstack(&ss, nullptr);
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = &OnSegv;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &g_previous_segv);
  });
}
Scheduler& TheScheduler() {
  if (t_scheduler == nullptr) t_scheduler = new Scheduler();  // kept for the thread's life
  return *t_scheduler;
}

std::mutex g_attributes_mutex;
std::unordered_map<const void*, int> g_max_dynamic_shared;  // cudaFuncSetAttribute

void FiberMain(bc::transfer_t from) {
  Scheduler* s = static_cast<Scheduler*>(from.data);
  s->back = from.fctx;
  s->entry(s->params);
  t_checking = false;
  s->running->status = Status::kDone;
  bc::jump_fcontext(s->back, nullptr);
  __builtin_unreachable();
}

// From a fiber: back to the scheduler until it resumes us.
void Suspend() {
  const bool checking = t_checking;
  t_checking = false;
  Scheduler& s = TheScheduler();
  const bc::transfer_t from = bc::jump_fcontext(s.back, nullptr);
  s.back = from.fctx;
  t_checking = checking;
}

void Resume(Scheduler& s, Fiber& f) {
  s.running = &f;
  t_thread = &f.state;
  const bc::transfer_t from = bc::jump_fcontext(f.context, &s);
  f.context = from.fctx;
  t_thread = nullptr;
  t_checking = false;
  s.running = nullptr;
}

std::string ThreadText(const Fiber& f) {
  return Format("thread (%u,%u,%u)", f.state.idx.x, f.state.idx.y, f.state.idx.z);
}
std::string BlockText(const BlockState& b) {
  return Format("kernel %s block (%u,%u,%u)", b.kernel, b.idx.x, b.idx.y, b.idx.z);
}

const char* OpName(WarpOp op) {
  switch (op) {
    case WarpOp::kShfl: return "__shfl_sync";
    case WarpOp::kShflUp: return "__shfl_up_sync";
    case WarpOp::kShflDown: return "__shfl_down_sync";
    case WarpOp::kShflXor: return "__shfl_xor_sync";
    case WarpOp::kBallot: return "__ballot_sync";
    case WarpOp::kSync: return "__syncwarp";
    case WarpOp::kCombine: return "a combined collective";
  }
  return "?";
}
// The collective a fiber waits in, for reports.
const char* CollectiveName(const Fiber& f) { return f.op == WarpOp::kCombine ? f.combine_name : OpName(f.op); }

const char* StatusText(Status s) {
  switch (s) {
    case Status::kDone: return "exited without reaching it";
    case Status::kBarrier: return "waits at __syncthreads";
    case Status::kWarp: return "waits in another warp collective";
    default: return "runs";
  }
}

// Releases the warp collectives whose lanes have all arrived. Returns whether any was;
// false with *failed set when a collective can never complete (reported).
bool ReleaseWarps(Scheduler& s, bool* failed) {
  bool released = false;
  const int n = static_cast<int>(s.fibers.size());
  for (int first = 0; first < n; ++first) {
    Fiber& f = s.fibers[first];
    if (f.status != Status::kWarp) continue;
    const int warp = first / 32, base = warp * 32, lanes = std::min(32, n - base), lane = first - base;
    const unsigned mask = f.mask;
    std::string problem;
    if (((mask >> lane) & 1u) == 0) {
      problem = Format("the mask %#x does not name the calling lane %d", mask, lane);
    } else if (lanes < 32 && (mask >> lanes) != 0) {
      problem = Format("the mask %#x names lanes past the block's last (the warp has %d lanes)", mask, lanes);
    } else if (f.op != WarpOp::kSync && f.op != WarpOp::kBallot && f.op != WarpOp::kCombine &&
               (f.width < 1 || f.width > 32 || (f.width & (f.width - 1)) != 0)) {
      problem = Format("width %d is not a power of two from 1 to 32", f.width);
    }
    bool ready = problem.empty();
    for (int k = 0; ready && k < lanes; ++k) {
      if (((mask >> k) & 1u) == 0) continue;
      const Fiber& g = s.fibers[base + k];
      if (g.status == Status::kWarp && g.mask == mask && g.op == f.op && g.combine == f.combine) continue;
      if (g.status == Status::kRunnable) {
        ready = false;  // not there yet
      } else if (g.status == Status::kWarp) {
        problem = Format("lane %d called %s with mask %#x", k, CollectiveName(g), g.mask);
      } else {
        problem = Format("lane %d named in the mask %s", k, StatusText(g.status));
      }
    }
    if (!problem.empty()) {
      Report(Format("cuda emulator: warp collective never completes: %s %s (lane %d) calls %s with mask %#x, but %s",
                    BlockText(s.block).c_str(), ThreadText(f).c_str(), lane, CollectiveName(f), mask, problem.c_str()));
      *failed = true;
      return false;
    }
    if (!ready) continue;
    if (f.op == WarpOp::kCombine) {
      void* lanes_data[32] = {};
      for (int k = 0; k < lanes; ++k) {
        if (((mask >> k) & 1u) != 0) lanes_data[k] = s.fibers[base + k].data;
      }
      f.combine(lanes_data);
    }
    // In lockstep: every lane's result from the values posted.
    uint64_t ballot = 0;
    for (int k = 0; k < lanes; ++k) {
      if (((mask >> k) & 1u) != 0 && s.fibers[base + k].value != 0) ballot |= uint64_t(1) << k;
    }
    for (int k = 0; k < lanes; ++k) {
      if (((mask >> k) & 1u) == 0) continue;
      Fiber& g = s.fibers[base + k];
      const int width = g.width, segment = k / std::max(width, 1) * std::max(width, 1);
      int src = k;
      switch (g.op) {
        case WarpOp::kShfl: src = segment + ((g.arg % width) + width) % width; break;
        case WarpOp::kShflUp: src = k - g.arg >= segment ? k - g.arg : k; break;
        case WarpOp::kShflDown: src = k + g.arg < segment + width ? k + g.arg : k; break;
        case WarpOp::kShflXor: src = (k ^ g.arg) < segment + width ? (k ^ g.arg) : k; break;
        default: break;
      }
      if (g.op == WarpOp::kBallot) {
        g.result = ballot;
      } else if (g.op != WarpOp::kSync) {
        // A lane outside the mask gives an undefined value (the CUDA guide): all-ones bits,
        // a NaN as any float and -1 as an integer, so that a use of it shows.
        if (src >= lanes || ((mask >> src) & 1u) == 0) {
          g.result = ~uint64_t{0};
          continue;
        }
        g.result = s.fibers[base + src].value;
      }
    }
    for (int k = 0; k < lanes; ++k) {
      if (((mask >> k) & 1u) != 0) s.fibers[base + k].status = Status::kRunnable;
    }
    ++s.block.warp_epoch[warp];
    released = true;
  }
  return released;
}

// Releases the block barrier when every thread waits at it. Returns whether it did;
// false with *failed set when it never can be (reported).
bool ReleaseBarrier(Scheduler& s, bool* failed) {
  const Fiber* waiting = nullptr;
  const Fiber* other = nullptr;
  for (const Fiber& f : s.fibers) {
    if (f.status == Status::kBarrier) {
      if (waiting == nullptr) waiting = &f;
    } else if (other == nullptr) {
      other = &f;
    }
  }
  if (waiting == nullptr) return false;
  if (other != nullptr) {
    Report(Format("cuda emulator: __syncthreads not reached by every thread: %s %s waits at __syncthreads (%s), %s %s",
                  BlockText(s.block).c_str(), ThreadText(*waiting).c_str(), waiting->site, ThreadText(*other).c_str(),
                  StatusText(other->status)));
    *failed = true;
    return false;
  }
  for (const Fiber& f : s.fibers) {
    if (std::strcmp(f.site, waiting->site) != 0) {
      Report(Format("cuda emulator: divergent __syncthreads: %s %s waits at %s, %s at %s: one barrier met at two "
                    "call sites",
                    BlockText(s.block).c_str(), ThreadText(*waiting).c_str(), waiting->site, ThreadText(f).c_str(),
                    f.site));
      break;
    }
  }
  for (Fiber& f : s.fibers) f.status = Status::kRunnable;
  ++s.block.epoch;
  return true;
}

// Runs one block to its end. Returns cudaSuccess, or the error that ended it.
cudaError_t RunBlock(Scheduler& s) {
  BlockState& b = s.block;
  const dim3 d = b.dim;
  const int n = int(d.x * d.y * d.z);
  b.epoch = 1;
  b.warp_epoch.assign((n + 31) / 32, 0);
  b.shared.clear();
  s.fibers.assign(n, Fiber{});
  for (int i = 0; i < n; ++i) {
    Fiber& f = s.fibers[i];
    char* lo = s.StackLo(i);
    f.context = bc::make_fcontext(lo + kStackBytes, kStackBytes, &FiberMain);
    f.state.stack_lo = reinterpret_cast<uintptr_t>(lo);
    f.state.stack_hi = reinterpret_cast<uintptr_t>(lo + kStackBytes);
    f.state.idx = uint3{unsigned(i) % d.x, (unsigned(i) / d.x) % d.y, unsigned(i) / (d.x * d.y)};
    f.state.linear = i;
    f.state.warp = i / 32;
    f.state.lane = i % 32;
  }
  t_block = &b;
  cudaError_t result = cudaSuccess;
  for (;;) {
    bool all_done = true;
    for (Fiber& f : s.fibers) {
      if (f.status == Status::kRunnable) Resume(s, f);
      if (f.status == Status::kKilled) {
        result = s.error;
        break;
      }
      all_done = all_done && f.status == Status::kDone;
    }
    if (result != cudaSuccess || all_done) break;
    bool failed = false;
    if (ReleaseWarps(s, &failed)) continue;
    if (!failed && ReleaseBarrier(s, &failed)) continue;
    if (!failed) {
      Report(Format("cuda emulator: deadlock: %s: no thread can go on", BlockText(b).c_str()));
    }
    result = cudaErrorLaunchFailure;
    break;
  }
  t_block = nullptr;
  return result;
}

Fiber& Running() { return *TheScheduler().running; }

}  // namespace

std::string WhereNow() {
  if (t_block == nullptr || t_thread == nullptr) return "host code";
  return Format("%s thread (%u,%u,%u)", BlockText(*t_block).c_str(), t_thread->idx.x, t_thread->idx.y,
                t_thread->idx.z);
}

void KillThread(cudaError_t error) {
  Scheduler& s = TheScheduler();
  s.error = error;
  s.running->status = Status::kKilled;
  t_checking = false;
  bc::jump_fcontext(s.back, nullptr);
  __builtin_unreachable();
}

uint3 ThreadIdx() { return t_thread->idx; }
uint3 BlockIdx() { return t_block->idx; }
dim3 BlockDim() { return t_block->dim; }
dim3 GridDim() { return t_block->grid; }
void BeginThread() { t_checking = true; }
void* DynamicShared() { return t_block->dynamic_shared; }

void SyncThreads(const char* site) {
  Fiber& f = Running();
  f.status = Status::kBarrier;
  f.site = site;
  Suspend();
}

uint64_t WarpCollective(WarpOp op, unsigned mask, uint64_t value, int arg, int width) {
  Fiber& f = Running();
  f.status = Status::kWarp;
  f.op = op;
  f.mask = mask;
  f.value = value;
  f.arg = arg;
  f.width = width;
  if (op != WarpOp::kCombine) f.combine = nullptr;  // CombineInWarp sets its own
  Suspend();
  return f.result;
}

void CombineInWarp(const char* name, WarpCombine combine, unsigned mask, void* data) {
  Fiber& f = Running();
  f.combine = combine;
  f.combine_name = name;
  f.data = data;
  WarpCollective(WarpOp::kCombine, mask, 0, 0, 32);
}

unsigned ActiveMask() {
  Scheduler& s = TheScheduler();
  const int base = s.running->state.warp * 32, lanes = std::min<int>(32, int(s.fibers.size()) - base);
  unsigned mask = 0;
  for (int k = 0; k < lanes; ++k) {
    if (s.fibers[base + k].status != Status::kDone) mask |= 1u << k;
  }
  return mask;
}

void SetMaxDynamicShared(const void* kernel, int bytes) {
  std::lock_guard lock(g_attributes_mutex);
  g_max_dynamic_shared[kernel] = bytes;
}

cudaError_t LaunchKernel(const char* name, const void* kernel, dim3 grid, dim3 block, size_t shared_bytes,
                         cudaStream_t stream, void (*entry)(const void*), const void* params,
                         std::shared_ptr<const void> (*copy_params)(const void*), size_t params_bytes) {
  if (const cudaError_t sticky = StickyError(); sticky != cudaSuccess) return SetLastError(sticky), sticky;
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (block.x == 0 || block.y == 0 || block.z == 0 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
      threads > kMaxThreadsPerBlock || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu ||
      grid.y > 65535 || grid.z > 65535) {
    SetLastError(cudaErrorInvalidConfiguration);
    return cudaErrorInvalidConfiguration;
  }
  size_t limit = kStaticSharedLimit;
  {
    std::lock_guard lock(g_attributes_mutex);
    if (auto it = g_max_dynamic_shared.find(kernel); it != g_max_dynamic_shared.end()) {
      limit = std::max(limit, size_t(it->second));
    }
  }
  if (shared_bytes > std::min(limit, kOptInSharedLimit)) {
    SetLastError(cudaErrorInvalidValue);
    return cudaErrorInvalidValue;
  }
  if (copy_params != nullptr && Capturing(stream)) {  // recorded, its configuration checked (as the driver does)
    std::shared_ptr<const void> copy = copy_params(params);
    const void* own = copy.get();
    auto replay = [=](cudaStream_t s) {
      LaunchKernel(name, kernel, grid, block, shared_bytes, s, entry, own, nullptr, 0);
    };
    if (RecordNode(stream, name, replay, std::move(copy), params_bytes, {}, GraphNode::Type::kKernel)) {
      return cudaSuccess;
    }
  }
  if (const cudaError_t e = LegacyWorkDuringCapture(stream); e != cudaSuccess) return SetLastError(e), e;
  WaitStream(stream);
  Scheduler& s = TheScheduler();
  if (s.running != nullptr) {
    Report(Format("cuda emulator: kernel %s launched from device code (%s); dynamic parallelism is not emulated", name,
                  WhereNow().c_str()));
    return cudaErrorNotSupported;
  }
  // What the launch did, added to the tally however it ends (a faulting launch ran too).
  CallCounts counts{.stamp = NextCountStamp()};
  struct Tally {
    const char* name;
    uint64_t threads;
    CallCounts* counts;
    ~Tally() {
      t_counts = nullptr;
      AddWork(name, WorkTally{.kind = WorkKind::kKernel, .calls = 1, .threads = threads, .mma = counts->mma,
                              .ldmatrix = counts->ldmatrix, .cp_async = counts->cp_async,
                              .bytes_read = counts->bytes_read, .bytes_written = counts->bytes_written});
    }
  } tally{name, uint64_t(grid.x) * grid.y * grid.z * threads, &counts};
  t_counts = &counts;
  s.entry = entry;
  s.params = params;
  s.error = cudaSuccess;
  s.dynamic_shared.assign(shared_bytes, char(0xff));
  s.block.kernel = name;
  s.block.dim = block;
  s.block.grid = grid;
  s.block.dynamic_shared = shared_bytes > 0 ? s.dynamic_shared.data() : nullptr;
  s.block.dynamic_bytes = shared_bytes;
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        s.block.idx = uint3{x, y, z};
        if (const cudaError_t e = RunBlock(s); e != cudaSuccess) {
          SetStickyError(e);  // as a GPU's faulting kernel leaves its context
          return e;
        }
      }
    }
  }
  return cudaSuccess;
}

}  // namespace msemu

// ---- Arithmetic without contraction (out of line: the caller cannot fuse it) -------

float __fadd_rn(float a, float b) { return a + b; }
float __fsub_rn(float a, float b) { return a - b; }
float __fmul_rn(float a, float b) { return a * b; }
float __fdiv_rn(float a, float b) { return a / b; }
float __fsqrt_rn(float a) { return std::sqrt(a); }
double __dadd_rn(double a, double b) { return a + b; }
double __dsub_rn(double a, double b) { return a - b; }
double __dmul_rn(double a, double b) { return a * b; }
double __ddiv_rn(double a, double b) { return a / b; }
double __dsqrt_rn(double a) { return std::sqrt(a); }

// ---- Atomics ----------------------------------------------------------------------

namespace {

template <typename T, typename F>
T AtomicUpdate(T* address, F update) {
  msemu::CheckAtomic(reinterpret_cast<uintptr_t>(address), sizeof(T));
  T old;
  __atomic_load(address, &old, __ATOMIC_SEQ_CST);
  T desired = update(old);
  while (!__atomic_compare_exchange(address, &old, &desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    desired = update(old);
  }
  return old;
}

}  // namespace

int atomicAdd(int* a, int v) { return AtomicUpdate(a, [v](int x) { return x + v; }); }
unsigned atomicAdd(unsigned* a, unsigned v) { return AtomicUpdate(a, [v](unsigned x) { return x + v; }); }
unsigned long long atomicAdd(unsigned long long* a, unsigned long long v) {
  return AtomicUpdate(a, [v](unsigned long long x) { return x + v; });
}
float atomicAdd(float* a, float v) { return AtomicUpdate(a, [v](float x) { return x + v; }); }
double atomicAdd(double* a, double v) { return AtomicUpdate(a, [v](double x) { return x + v; }); }
int atomicMax(int* a, int v) { return AtomicUpdate(a, [v](int x) { return std::max(x, v); }); }
int atomicMin(int* a, int v) { return AtomicUpdate(a, [v](int x) { return std::min(x, v); }); }
int atomicCAS(int* a, int compare, int v) { return AtomicUpdate(a, [=](int x) { return x == compare ? v : x; }); }
unsigned atomicCAS(unsigned* a, unsigned compare, unsigned v) {
  return AtomicUpdate(a, [=](unsigned x) { return x == compare ? v : x; });
}
int atomicExch(int* a, int v) { return AtomicUpdate(a, [v](int) { return v; }); }
