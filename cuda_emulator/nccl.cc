// NCCL on the emulated device: the communicator calls the project makes (parallel/
// nccl_communicator.cc), between the processes of one job on one node. Test
// infrastructure (MULTISCREEN_CUDA=EMULATED), not for the product's build.
//
// Transport: one POSIX shared-memory segment per communicator, named by the unique id
// ("/msemu-nccl-<32 hex>"): rank 0 creates it, every rank maps it and writes its slot
// (pid, host, device), and rank 0 unlinks it once all have joined, so that a killed job
// leaves nothing in /dev/shm. Collectives go in lock-step rounds through one 1 MiB
// slot per rank (post, wait for all, read, leave); point-to-point messages through one
// mailbox per ordered pair of ranks.
//
// Semantics enforced (NCCL's documented rules, checked where NCCL would only hang or
// corrupt):
//  - Every call returns at once; the work runs on the stream's worker thread
//    (msemu::Enqueue), a communicator's operations in issue order. Polling the stream
//    and ncclCommGetAsyncError is what waits.
//  - Every wait notices ncclCommAbort, a peer process that exited, and a peer whose
//    communicator was destroyed, aborted or failed: the operation fails
//    (ncclRemoteError) instead of hanging. A failed operation then holds its stream, as
//    NCCL's kernel does, until the communicator is aborted or destroyed.
//  - Ranks that call a different operation, count, type, reduction or root at the same
//    point, or a receive whose size differs from the send, are reported
//    (msemu::Report) and fail with ncclInvalidUsage.
//  - Buffers must be device memory of the communicator's device over the bytes the
//    operation touches (else Report and ncclInvalidArgument); inputs must be
//    initialized (else Report); outputs become initialized.
//  - Reductions combine the ranks' values in rank order 0..n-1 on every rank, so all
//    ranks get bit-identical results.
#include <nccl.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cuda_emulator/emulator.h"
#include "cuda_emulator/internal.h"

// The communicator handle: a shell that outlives the communicator (a stale handle after
// destroy or abort reads as invalid instead of as freed memory).
struct ncclComm;

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kIdMagic[] = "msemu-nccl-id";
constexpr uint64_t kSegmentMagic = 0x316c63636e756d65ULL;  // "emuncl1"
constexpr size_t kCollChunk = size_t{1} << 20;           // bytes per rank per collective round

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<int32_t>::is_always_lock_free,
              "shared-memory atomics must be lock-free (address-free)");

// ---- The shared segment ----------------------------------------------------------------

struct alignas(64) SegmentHeader {
  std::atomic<uint64_t> magic;  // set last by rank 0
  int32_t creator_pid;          // rank 0's process, written before magic
  int32_t nranks;
  uint64_t total_bytes;
  std::atomic<int32_t> unlinked;  // rank 0 removed the name: initialization is complete
};

// A rank's state as its peers see it.
enum PeerState : int32_t { kAlive = 0, kDestroyed = 1, kAborted = 2, kFailed = 3 };

struct alignas(64) RankSlot {
  std::atomic<int32_t> joined;  // 1 once the fields below are written
  std::atomic<int32_t> state;   // PeerState
  int32_t pid;
  int32_t device;
  char host[64];
  char bus_id[32];
};

// What a rank called at one collective round; every rank's must match.
struct OpDesc {
  int32_t kind, dtype, redop, root;
  uint64_t count, op_index, round;
  bool operator==(const OpDesc&) const = default;
};

struct alignas(64) CollSlot {
  std::atomic<uint64_t> arrived;  // last round whose data is posted
  std::atomic<uint64_t> left;     // last round this rank finished reading
  OpDesc desc;
};

// One chunk in flight from rank s to rank d.
struct alignas(64) Mailbox {
  std::atomic<uint64_t> posted, consumed;  // chunks
  uint64_t message, message_bytes, offset, bytes;
  int32_t dtype;
};

struct Layout {
  size_t p2p_chunk, ranks, coll, mail, coll_data, mail_data, total;
};

Layout LayoutFor(int n) {
  Layout l;
  const size_t nn = static_cast<size_t>(n) * n;
  // Mailboxes shrink with the square of the ranks (the segment is sparse, but /dev/shm
  // may be small): 256 KiB for up to 11 ranks, 16 KiB at least.
  l.p2p_chunk = std::clamp<size_t>((size_t{32} << 20) / nn, size_t{16} << 10, size_t{256} << 10) & ~size_t{4095};
  auto align = [](size_t x) { return (x + 4095) & ~size_t{4095}; };
  l.ranks = align(sizeof(SegmentHeader));
  l.coll = l.ranks + align(sizeof(RankSlot) * n);
  l.mail = l.coll + align(sizeof(CollSlot) * n);
  l.coll_data = l.mail + align(sizeof(Mailbox) * nn);
  l.mail_data = l.coll_data + kCollChunk * n;
  l.total = l.mail_data + l.p2p_chunk * nn;
  return l;
}

// ---- Data types and reductions ---------------------------------------------------------

size_t TypeSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

const char* TypeName(int t) {
  static const char* const names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16",
                                      "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  return t >= 0 && t < ncclNumTypes ? names[t] : "unknown type";
}

const char* RedOpName(int op) {
  static const char* const names[] = {"sum", "prod", "max", "min", "avg"};
  return op >= 0 && op < ncclNumOps ? names[op] : "unknown op";
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: renormalize
      int e = -1;
      uint32_t m = man;
      do { ++e; m <<= 1; } while ((m & 0x400) == 0);
      bits = sign | ((127 - 15 - e) << 23) | ((m & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToHalf(float f) {  // round to nearest even
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
  if (abs < 0x38800000u) {                                               // subnormal half
    const int shift = 113 - static_cast<int>(abs >> 23);
    if (shift > 24) return static_cast<uint16_t>(sign);
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    uint32_t h = m >> (shift + 13);
    const uint32_t rest = m & ((1u << (shift + 13)) - 1), half = 1u << (shift + 12);
    if (rest > half || (rest == half && (h & 1))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = ((abs - 0x38000000u) >> 13);
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7fffu + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

template <typename T>
T Combine(T a, T b, ncclRedOp_t op) {
  switch (op) {
    case ncclProd: return static_cast<T>(a * b);
    case ncclMax: return b > a ? b : a;
    case ncclMin: return b < a ? b : a;
    default: return static_cast<T>(a + b);  // sum, avg
  }
}

// out[i] = in_0[i] ∘ in_1[i] ∘ … ∘ in_{n-1}[i], left to right (rank order).
template <typename T>
void ReduceTyped(const std::vector<const uint8_t*>& in, uint8_t* out, size_t count, ncclRedOp_t op) {
  const size_t n = in.size();
  for (size_t i = 0; i < count; ++i) {
    T acc;
    std::memcpy(&acc, in[0] + i * sizeof(T), sizeof(T));
    for (size_t k = 1; k < n; ++k) {
      T v;
      std::memcpy(&v, in[k] + i * sizeof(T), sizeof(T));
      acc = Combine(acc, v, op);
    }
    if (op == ncclAvg) acc = static_cast<T>(acc / static_cast<T>(n));
    std::memcpy(out + i * sizeof(T), &acc, sizeof(T));
  }
}

// 16-bit floats: each step rounds back to the type, as the device's arithmetic does.
template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void Reduce16(const std::vector<const uint8_t*>& in, uint8_t* out, size_t count, ncclRedOp_t op) {
  const size_t n = in.size();
  for (size_t i = 0; i < count; ++i) {
    uint16_t raw;
    std::memcpy(&raw, in[0] + 2 * i, 2);
    for (size_t k = 1; k < n; ++k) {
      uint16_t v;
      std::memcpy(&v, in[k] + 2 * i, 2);
      raw = FromF(Combine(ToF(raw), ToF(v), op));
    }
    if (op == ncclAvg) raw = FromF(ToF(raw) / static_cast<float>(n));
    std::memcpy(out + 2 * i, &raw, 2);
  }
}

void Reduce(const std::vector<const uint8_t*>& in, uint8_t* out, size_t count, ncclDataType_t t, ncclRedOp_t op) {
  switch (t) {
    case ncclInt8: return ReduceTyped<int8_t>(in, out, count, op);
    case ncclUint8: return ReduceTyped<uint8_t>(in, out, count, op);
    case ncclInt32: return ReduceTyped<int32_t>(in, out, count, op);
    case ncclUint32: return ReduceTyped<uint32_t>(in, out, count, op);
    case ncclInt64: return ReduceTyped<int64_t>(in, out, count, op);
    case ncclUint64: return ReduceTyped<uint64_t>(in, out, count, op);
    case ncclFloat32: return ReduceTyped<float>(in, out, count, op);
    case ncclFloat64: return ReduceTyped<double>(in, out, count, op);
    case ncclFloat16: return Reduce16<HalfToFloat, FloatToHalf>(in, out, count, op);
    case ncclBfloat16: return Reduce16<Bf16ToFloat, FloatToBf16>(in, out, count, op);
    default: return;  // rejected when issued
  }
}

// ---- Communicator state ---------------------------------------------------------------

enum OpKind : int32_t { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kSend, kRecv };

const char* KindName(int k) {
  static const char* const names[] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather",
                                      "ncclBroadcast", "ncclSend", "ncclRecv"};
  return k >= 0 && k <= kRecv ? names[k] : "unknown operation";
}

struct Op {
  OpKind kind;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  ncclDataType_t dtype = ncclFloat32;
  ncclRedOp_t redop = ncclSum;
  int root = 0;  // broadcast root, or the peer of a send/recv
  cudaStream_t stream = nullptr;
};

std::string Describe(const OpDesc& d) {
  std::ostringstream s;
  s << KindName(d.kind) << "(count " << d.count << ", " << TypeName(d.dtype);
  if (d.kind == kAllReduce || d.kind == kReduceScatter) s << ", " << RedOpName(d.redop);
  if (d.kind == kBroadcast) s << ", root " << d.root;
  s << ") as collective #" << d.op_index;
  return s.str();
}

struct CommState {
  int rank = 0, nranks = 1, device = 0;
  bool blocking = true;
  std::string shm_name, host, bus_id;
  Layout layout{};
  uint8_t* base = nullptr;

  // ncclInProgress while initializing, then ncclSuccess or the first error.
  std::atomic<int> result{ncclInProgress};
  std::atomic<bool> aborted{false};   // ncclCommAbort
  std::atomic<bool> released{false};  // aborted or destroyed: stalled work may end
  std::atomic<bool> finalizing{false};
  std::atomic<bool> unlinked{false};
  std::atomic<int64_t> pending{0};  // issued tasks not yet finished
  std::mutex mu;                    // last_error, the first error
  std::string last_error;
  std::mutex issue_mu;                 // issue order
  uint64_t issued = 0;                 // tickets handed out (under issue_mu)
  std::atomic<uint64_t> completed{0};  // tickets finished, in order

  // Used only by the task holding the current ticket.
  uint64_t round = 0, collectives = 0;
  std::vector<uint64_t> sent, received;  // messages per peer

  ~CommState() {
    if (base != nullptr) munmap(base, layout.total);
  }
  SegmentHeader* header() { return reinterpret_cast<SegmentHeader*>(base); }
  RankSlot* slot(int r) { return reinterpret_cast<RankSlot*>(base + layout.ranks) + r; }
  CollSlot* coll(int r) { return reinterpret_cast<CollSlot*>(base + layout.coll) + r; }
  uint8_t* coll_data(int r) { return base + layout.coll_data + kCollChunk * r; }
  Mailbox* mailbox(int s, int d) { return reinterpret_cast<Mailbox*>(base + layout.mail) + (s * nranks + d); }
  uint8_t* mail_data(int s, int d) { return base + layout.mail_data + layout.p2p_chunk * (s * nranks + d); }
  std::string who() const { return "rank " + std::to_string(rank) + " of " + std::to_string(nranks); }
};

}  // namespace

struct ncclComm {
  std::shared_ptr<CommState> state;  // null once destroyed or aborted
};

namespace {

std::mutex g_handles_mu;        // guards every ncclComm::state
std::mutex g_last_error_mu;
std::string g_last_error;       // for ncclGetLastError(nullptr)

std::shared_ptr<CommState> Lookup(ncclComm_t comm) {
  if (comm == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(g_handles_mu);
  return comm->state;
}

std::shared_ptr<CommState> Take(ncclComm_t comm) {
  if (comm == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(g_handles_mu);
  return std::move(comm->state);
}

void SetLastError(CommState* c, const std::string& message) {
  if (c != nullptr) {
    std::lock_guard<std::mutex> lock(c->mu);
    c->last_error = message;
  }
  std::lock_guard<std::mutex> lock(g_last_error_mu);
  g_last_error = message;
}

// A warning as NCCL prints it (NCCL_DEBUG=WARN), always on: these are rare and say why.
void Warn(CommState* c, const std::string& message) {
  std::fprintf(stderr, "NCCL WARN [emulated]%s %s\n", c != nullptr ? (" " + c->who() + ":").c_str() : "",
               message.c_str());
  SetLastError(c, message);
}

// A checker finding (misuse that real NCCL would hang or corrupt on).
void Finding(CommState* c, const std::string& message) {
  SetLastError(c, message);
  msemu::Report("cuda emulator: NCCL " + message);
}

// Records the communicator's first error (the async error), and tells the peers. The
// message is in place before the error shows (ncclGetLastError after the poll).
void SetError(CommState& c, ncclResult_t error, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(c.mu);
    const int now = c.result.load();
    if (now != ncclSuccess && now != ncclInProgress) return;
    if (!message.empty()) c.last_error = message;
    c.result.store(error);
  }
  if (c.base != nullptr && !c.released.load()) c.slot(c.rank)->state.store(kFailed);
  if (!message.empty()) Warn(&c, message);
}

// Rank 0 removes the segment's name (once all ranks have mapped it, or on failure).
void Unlink(CommState& c) {
  if (c.rank == 0 && !c.unlinked.exchange(true)) shm_unlink(c.shm_name.c_str());
}

bool PidGone(int pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0) return errno == ESRCH;
  // A zombie (exited, not yet reaped by its parent) counts as gone. Read with read(2),
  // not a stream: a process reaped between kill() and the read makes read() fail with
  // ESRCH, which libstdc++'s filebuf throws as an exception (seen in CI); that is gone too.
  const int fd = open(("/proc/" + std::to_string(pid) + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT || errno == ESRCH;
  char buffer[512];
  const ssize_t got = read(fd, buffer, sizeof(buffer));
  const int read_errno = errno;
  close(fd);
  if (got < 0) return read_errno == ESRCH;
  const std::string text(buffer, static_cast<size_t>(got));
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && (text[paren + 2] == 'Z' || text[paren + 2] == 'X');
}

// Removes the segments of communicators whose rank 0 died before every rank had joined
// (kill -9 during initialization: nobody was left to remove the name). Only segments
// whose creator is known and gone; a live job's are left alone.
void SweepStaleSegments() {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind("msemu-nccl-", 0) != 0) continue;
    const int fd = shm_open(("/" + name).c_str(), O_RDONLY, 0);
    if (fd < 0) continue;
    struct stat st {};
    int32_t creator = 0;
    bool stale = false;
    if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= sizeof(SegmentHeader)) {
      void* p = mmap(nullptr, sizeof(SegmentHeader), PROT_READ, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) {
        const auto* header = static_cast<const SegmentHeader*>(p);
        if (header->magic.load(std::memory_order_acquire) == kSegmentMagic) creator = header->creator_pid;
        munmap(p, sizeof(SegmentHeader));
        stale = creator > 0 && PidGone(creator);
      }
    }
    close(fd);
    if (stale) {
      shm_unlink(("/" + name).c_str());
      std::fprintf(stderr, "NCCL WARN [emulated] removed /dev/shm/%s, left by rank 0 (pid %d), which died during "
                           "initialization\n", name.c_str(), creator);
    }
  }
  closedir(dir);
}

// The waits: a short spin, then sleeps growing to 0.5 ms. Between them, checks that
// the wait can still end: own abort, and the peers `peers` (-1: all) alive and healthy.
class Waiter {
 public:
  Waiter(CommState& c, std::string what) : c_(c), what_(std::move(what)) {}

  // Back to spinning (a new wait, or progress made).
  void Reset() { iterations_ = 0; }

  // ncclSuccess to keep waiting; otherwise the error, with the reason in *why.
  ncclResult_t Pause(const std::vector<int>& peers, std::string* why) {
    if (c_.released.load()) {
      *why = "the communicator was aborted during " + what_;
      return ncclSystemError;
    }
    ++iterations_;
    if (iterations_ < 50) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(std::min<int64_t>(500, 10 * (iterations_ - 49))));
    }
    const Clock::time_point now = Clock::now();
    if (now < next_check_) return ncclSuccess;
    next_check_ = now + std::chrono::milliseconds(5);
    for (int p : peers) {
      if (p == c_.rank || c_.base == nullptr) continue;
      RankSlot* s = c_.slot(p);
      if (s->joined.load(std::memory_order_acquire) == 0) continue;
      const int32_t state = s->state.load(std::memory_order_acquire);
      if (state != kAlive) {
        *why = "rank " + std::to_string(p) + " " +
               (state == kDestroyed ? "destroyed" : state == kAborted ? "aborted" : "had an error on") +
               " its communicator while rank " + std::to_string(c_.rank) + " waited for it in " + what_;
        return ncclRemoteError;
      }
      if (std::strncmp(s->host, c_.host.c_str(), sizeof(s->host)) == 0 && PidGone(s->pid)) {
        *why = "rank " + std::to_string(p) + " (pid " + std::to_string(s->pid) + ") exited while rank " +
               std::to_string(c_.rank) + " waited for it in " + what_;
        return ncclRemoteError;
      }
    }
    return ncclSuccess;
  }

  // Waits until ready(); an error (set on the communicator) when the wait cannot end.
  // A peer that finished its part and then left is not an error: ready() is asked
  // once more after a failed check.
  template <typename Ready>
  ncclResult_t Until(const std::vector<int>& peers, Ready ready) {
    Reset();
    while (!ready()) {
      std::string why;
      if (const ncclResult_t e = Pause(peers, &why); e != ncclSuccess) {
        if (ready()) return ncclSuccess;
        SetError(c_, e, why);
        return e;
      }
    }
    return ncclSuccess;
  }

 private:
  CommState& c_;
  std::string what_;
  int64_t iterations_ = 0;
  Clock::time_point next_check_{};
};

std::vector<int> AllRanks(int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

// ---- Initialization ---------------------------------------------------------------------

// Joins the segment named by the unique id and checks the ranks (NCCL's bootstrap).
ncclResult_t Rendezvous(CommState& c) {
  const Layout l = LayoutFor(c.nranks);
  c.layout = l;
  Waiter waiter(c, "ncclCommInitRank");
  const std::vector<int> none;
  std::string why;
  auto fail = [&](ncclResult_t e, const std::string& message) {
    SetError(c, e, message);
    Unlink(c);
    return e;
  };
  int fd = -1;
  if (c.rank == 0) {
    SweepStaleSegments();
    fd = shm_open(c.shm_name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      c.unlinked = true;  // not ours to remove
      return fail(errno == EEXIST ? ncclInvalidUsage : ncclSystemError,
                  "shm_open(" + c.shm_name + "): " + std::strerror(errno) +
                      (errno == EEXIST ? " (a unique id serves one communicator)" : ""));
    }
    if (ftruncate(fd, static_cast<off_t>(l.total)) != 0) {
      const std::string e = std::strerror(errno);
      close(fd);
      return fail(ncclSystemError, "ftruncate(" + c.shm_name + ", " + std::to_string(l.total) + "): " + e);
    }
  } else {
    while ((fd = shm_open(c.shm_name.c_str(), O_RDWR, 0600)) < 0) {
      if (errno != ENOENT) return fail(ncclSystemError, "shm_open(" + c.shm_name + "): " + std::strerror(errno));
      if (const ncclResult_t e = waiter.Pause(none, &why); e != ncclSuccess) return fail(e, why);
    }
    for (;;) {  // rank 0 may not have sized it yet
      struct stat st {};
      if (fstat(fd, &st) != 0) {
        const std::string e = std::strerror(errno);
        close(fd);
        return fail(ncclSystemError, "fstat(" + c.shm_name + "): " + e);
      }
      if (static_cast<size_t>(st.st_size) == l.total) break;
      if (st.st_size != 0) {
        close(fd);
        return fail(ncclInvalidUsage, "rank " + std::to_string(c.rank) + " was given nranks " +
                                          std::to_string(c.nranks) + ", but rank 0 made the communicator for " +
                                          "a different number of ranks");
      }
      if (const ncclResult_t e = waiter.Pause(none, &why); e != ncclSuccess) {
        close(fd);
        return fail(e, why);
      }
    }
  }
  void* p = mmap(nullptr, l.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return fail(ncclSystemError, "mmap(" + c.shm_name + "): " + std::strerror(errno));
  c.base = static_cast<uint8_t*>(p);
  if (c.rank == 0) {
    c.header()->creator_pid = static_cast<int32_t>(getpid());
    c.header()->nranks = c.nranks;
    c.header()->total_bytes = l.total;
    c.header()->magic.store(kSegmentMagic, std::memory_order_release);
  } else {
    const ncclResult_t e =
        waiter.Until(none, [&] { return c.header()->magic.load(std::memory_order_acquire) == kSegmentMagic; });
    if (e != ncclSuccess) return e;
    if (c.header()->nranks != c.nranks) {
      return fail(ncclInvalidUsage, "rank " + std::to_string(c.rank) + " was given nranks " +
                                        std::to_string(c.nranks) + ", rank 0 nranks " +
                                        std::to_string(c.header()->nranks));
    }
  }
  RankSlot* mine = c.slot(c.rank);
  if (mine->joined.load() != 0) {
    return fail(ncclInvalidUsage, "two processes joined the communicator as rank " + std::to_string(c.rank));
  }
  mine->pid = static_cast<int32_t>(getpid());
  mine->device = c.device;
  std::snprintf(mine->host, sizeof(mine->host), "%s", c.host.c_str());
  std::snprintf(mine->bus_id, sizeof(mine->bus_id), "%s", c.bus_id.c_str());
  mine->state.store(kAlive);
  mine->joined.store(1, std::memory_order_release);
  const std::vector<int> all = AllRanks(c.nranks);
  const ncclResult_t joined = waiter.Until(all, [&] {
    for (int r = 0; r < c.nranks; ++r) {
      if (c.slot(r)->joined.load(std::memory_order_acquire) == 0) return false;
    }
    return true;
  });
  if (joined != ncclSuccess) {
    Unlink(c);
    return joined;
  }
  // Every rank has it mapped: rank 0 removes the name, and the others wait for that, so
  // that an initialized communicator leaves nothing behind in /dev/shm.
  if (c.rank == 0) {
    Unlink(c);
    c.header()->unlinked.store(1, std::memory_order_release);
  } else if (const ncclResult_t e = waiter.Until(
                 {0}, [&] { return c.header()->unlinked.load(std::memory_order_acquire) != 0; });
             e != ncclSuccess) {
    return e;
  }
  for (int r = 0; r < c.nranks; ++r) {
    const RankSlot* s = c.slot(r);
    if (r != c.rank && std::strncmp(s->host, mine->host, sizeof(s->host)) == 0 &&
        std::strncmp(s->bus_id, mine->bus_id, sizeof(s->bus_id)) == 0) {
      SetError(c, ncclInvalidUsage,
               "Duplicate GPU detected : rank " + std::to_string(c.rank) + " and rank " + std::to_string(r) +
                   " both on CUDA device " + c.bus_id);
      return ncclInvalidUsage;
    }
  }
  c.sent.assign(c.nranks, 0);
  c.received.assign(c.nranks, 0);
  int expected = ncclInProgress;
  c.result.compare_exchange_strong(expected, ncclSuccess);
  return static_cast<ncclResult_t>(c.result.load());
}

bool ParseId(const ncclUniqueId& id, std::string* name) {
  if (std::strncmp(id.internal, kIdMagic, sizeof(kIdMagic)) != 0) return false;
  const char* n = id.internal + sizeof(kIdMagic);
  const size_t len = strnlen(n, NCCL_UNIQUE_ID_BYTES - sizeof(kIdMagic));
  if (len == 0 || len == NCCL_UNIQUE_ID_BYTES - sizeof(kIdMagic) || n[0] != '/') return false;
  name->assign(n, len);
  return true;
}

ncclResult_t InitRank(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank, bool blocking) {
  if (out == nullptr) {
    Warn(nullptr, "ncclCommInitRank: comm argument is NULL");
    return ncclInvalidArgument;
  }
  *out = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    Warn(nullptr, "Invalid rank requested : " + std::to_string(rank) + "/" + std::to_string(nranks));
    return ncclInvalidArgument;
  }
  auto c = std::make_shared<CommState>();
  if (!ParseId(id, &c->shm_name)) {
    Warn(nullptr, "ncclCommInitRank: the unique id did not come from ncclGetUniqueId");
    return ncclInvalidArgument;
  }
  c->rank = rank;
  c->nranks = nranks;
  c->blocking = blocking;
  c->device = msemu::CurrentDevice();
  c->bus_id = msemu::PciBusId(msemu::NodeDeviceIndex(c->device));
  char host[64] = {};
  gethostname(host, sizeof(host) - 1);
  c->host = host;
  auto* handle = new ncclComm{c};  // the shell is never freed (see ncclComm)
  if (blocking) {
    const ncclResult_t r = Rendezvous(*c);
    if (r != ncclSuccess) {
      c->released = true;
      Take(handle);
      return r;
    }
    *out = handle;
    return ncclSuccess;
  }
  *out = handle;
  std::thread([c] { Rendezvous(*c); }).detach();
  return ncclInProgress;
}

// ---- Running operations -----------------------------------------------------------------

// Reports a range that is not device memory of the communicator's device; false then.
bool CheckBuffer(CommState& c, const char* fn, const char* name, const void* p, size_t bytes) {
  if (bytes == 0) return true;
  const std::string bad = msemu::DescribeBadDeviceRange(p, bytes);
  std::ostringstream s;
  if (!bad.empty()) {
    s << fn << " (" << c.who() << "): " << name << " [" << p << ", +" << bytes << " bytes) is not device memory: "
      << bad;
  } else if (const msemu::Allocation* a = msemu::FindAllocation(p); a != nullptr && a->device != c.device) {
    s << fn << " (" << c.who() << "): " << name << " " << p << " is memory of device " << a->device
      << ", but the communicator's device is " << c.device;
  } else {
    return true;
  }
  Finding(&c, s.str());
  return false;
}

void CheckInitialized(CommState& c, const char* fn, const void* p, size_t bytes) {
  if (bytes == 0) return;
  const int64_t at = msemu::FirstUninitialized(p, bytes);
  if (at < 0) return;
  std::ostringstream s;
  s << fn << " (" << c.who() << ") reads uninitialized device memory: byte " << at << " of its input " << p
    << " (" << bytes << " bytes) was never written";
  Finding(&c, s.str());
}

// One collective in lock-step rounds of kCollChunk bytes of each rank's input.
ncclResult_t RunCollective(CommState& c, const Op& op) {
  const int n = c.nranks, me = c.rank;
  const size_t es = TypeSize(op.dtype);
  const size_t bytes = op.count * es;                                     // this rank's part
  const size_t in_bytes = op.kind == kReduceScatter ? bytes * n : bytes;  // what each rank posts
  const auto* in = static_cast<const uint8_t*>(op.send);
  auto* out = static_cast<uint8_t*>(op.recv);
  const bool posts = op.kind != kBroadcast || op.root == me;
  if (posts) CheckInitialized(c, KindName(op.kind), in, in_bytes);
  const OpDesc desc0{op.kind, op.dtype, op.redop, op.root, op.count, ++c.collectives, 0};
  const std::vector<int> all = AllRanks(n);
  Waiter waiter(c, Describe(desc0));
  const size_t rounds = std::max<size_t>(1, (in_bytes + kCollChunk - 1) / kCollChunk);
  std::vector<const uint8_t*> parts(n);
  for (size_t k = 0; k < rounds; ++k) {
    const uint64_t t = ++c.round;
    const size_t off = k * kCollChunk, len = std::min(kCollChunk, in_bytes - std::min(in_bytes, off));
    // The slot is free once every rank has read the previous round.
    if (ncclResult_t e = waiter.Until(all, [&] {
          for (int r = 0; r < n; ++r) {
            if (c.coll(r)->left.load(std::memory_order_acquire) < t - 1) return false;
          }
          return true;
        });
        e != ncclSuccess) {
      return e;
    }
    if (posts && len > 0) std::memcpy(c.coll_data(me), in + off, len);
    OpDesc desc = desc0;
    desc.round = k;
    c.coll(me)->desc = desc;
    c.coll(me)->arrived.store(t, std::memory_order_release);
    if (ncclResult_t e = waiter.Until(all, [&] {
          for (int r = 0; r < n; ++r) {
            if (c.coll(r)->arrived.load(std::memory_order_acquire) < t) return false;
          }
          return true;
        });
        e != ncclSuccess) {
      return e;
    }
    for (int r = 0; r < n; ++r) {
      const OpDesc theirs = c.coll(r)->desc;
      if (!(theirs == desc)) {
        OpDesc a = desc, b = theirs;
        a.round = b.round = 0;
        Finding(&c, "operation mismatch: rank " + std::to_string(me) + " called " + Describe(a) + ", but rank " +
                        std::to_string(r) + " called " + Describe(b) +
                        (a == b ? " (at a different round)" : "") + " at the same point of the communicator");
        SetError(c, ncclInvalidUsage, "");
        return ncclInvalidUsage;
      }
      parts[r] = c.coll_data(r);
    }
    switch (op.kind) {
      case kAllReduce:
        Reduce(parts, out + off, len / es, op.dtype, op.redop);
        msemu::MarkInitialized(out + off, len);
        break;
      case kReduceScatter: {
        const size_t lo = std::max(off, me * bytes), hi = std::min(off + len, (me + 1) * bytes);
        if (lo < hi) {
          for (auto& q : parts) q += lo - off;
          Reduce(parts, out + (lo - me * bytes), (hi - lo) / es, op.dtype, op.redop);
          msemu::MarkInitialized(out + (lo - me * bytes), hi - lo);
        }
        break;
      }
      case kAllGather:
        for (int r = 0; r < n; ++r) {
          if (len > 0 && out + r * bytes + off != parts[r]) std::memcpy(out + r * bytes + off, parts[r], len);
        }
        if (len > 0) {
          for (int r = 0; r < n; ++r) msemu::MarkInitialized(out + r * bytes + off, len);
        }
        break;
      case kBroadcast:
        if (len > 0) {
          std::memcpy(out + off, parts[op.root], len);
          msemu::MarkInitialized(out + off, len);
        }
        break;
      default:
        break;
    }
    c.coll(me)->left.store(t, std::memory_order_release);
  }
  return ncclSuccess;
}

// The sends and receives of one group, all progressing together (no order between
// peers, FIFO per pair), so that a send and a receive in one group cannot deadlock.
ncclResult_t RunPointToPoint(CommState& c, const std::vector<const Op*>& ops) {
  struct Transfer {
    const Op* op;
    size_t bytes, done = 0;
  };
  const int n = c.nranks, me = c.rank;
  std::vector<std::vector<Transfer>> sends(n), recvs(n);  // per peer, in order
  for (const Op* op : ops) {
    const Transfer t{op, op->count * TypeSize(op->dtype)};
    if (op->kind == kSend) {
      CheckInitialized(c, "ncclSend", op->send, t.bytes);
      sends[op->root].push_back(t);
    } else {
      recvs[op->root].push_back(t);
    }
  }
  std::vector<size_t> next_send(n, 0), next_recv(n, 0);
  const size_t chunk = c.layout.p2p_chunk;
  Waiter waiter(c, "ncclSend/ncclRecv");
  for (;;) {
    bool progressed = false, left = false;
    std::vector<int> peers;
    for (int p = 0; p < n; ++p) {
      if (next_send[p] < sends[p].size()) {
        Transfer& t = sends[p][next_send[p]];
        Mailbox* mb = c.mailbox(me, p);
        if (mb->posted.load(std::memory_order_acquire) == mb->consumed.load(std::memory_order_acquire)) {
          const size_t len = std::min(chunk, t.bytes - t.done);
          std::memcpy(c.mail_data(me, p), static_cast<const uint8_t*>(t.op->send) + t.done, len);
          mb->message = c.sent[p];
          mb->message_bytes = t.bytes;
          mb->offset = t.done;
          mb->bytes = len;
          mb->dtype = t.op->dtype;
          mb->posted.fetch_add(1, std::memory_order_release);
          t.done += len;
          progressed = true;
          if (t.done == t.bytes) {
            ++c.sent[p];
            ++next_send[p];
          }
        }
      }
      if (next_recv[p] < recvs[p].size()) {
        Transfer& t = recvs[p][next_recv[p]];
        Mailbox* mb = c.mailbox(p, me);
        if (mb->posted.load(std::memory_order_acquire) > mb->consumed.load(std::memory_order_acquire)) {
          if (mb->message != c.received[p] || mb->message_bytes != t.bytes || mb->dtype != t.op->dtype ||
              mb->offset != t.done) {
            std::ostringstream s;
            s << "send/recv mismatch: rank " << p << " sent message #" << mb->message << " of " << mb->message_bytes
              << " bytes (" << TypeName(mb->dtype) << ") to rank " << me << ", which posted a receive of "
              << t.bytes << " bytes (" << TypeName(t.op->dtype) << ") as message #" << c.received[p]
              << " from rank " << p;
            Finding(&c, s.str());
            SetError(c, ncclInvalidUsage, "");
            return ncclInvalidUsage;
          }
          auto* dst = static_cast<uint8_t*>(t.op->recv) + t.done;
          std::memcpy(dst, c.mail_data(p, me), mb->bytes);
          msemu::MarkInitialized(dst, mb->bytes);
          t.done += mb->bytes;
          mb->consumed.fetch_add(1, std::memory_order_release);
          progressed = true;
          if (t.done == t.bytes) {
            ++c.received[p];
            ++next_recv[p];
          }
        }
      }
      if (next_send[p] < sends[p].size() || next_recv[p] < recvs[p].size()) {
        left = true;
        peers.push_back(p);
      }
    }
    if (!left) return ncclSuccess;
    if (progressed) {
      waiter.Reset();
      continue;
    }
    std::string why;
    if (const ncclResult_t e = waiter.Pause(peers, &why); e != ncclSuccess) {
      // The peer may have posted its last chunk and left: one more pass before failing.
      bool ready = false;
      for (int p : peers) {
        if (next_recv[p] < recvs[p].size()) {
          Mailbox* mb = c.mailbox(p, me);
          ready |= mb->posted.load(std::memory_order_acquire) > mb->consumed.load(std::memory_order_acquire);
        }
      }
      if (ready) continue;
      SetError(c, e, why);
      return e;
    }
  }
}

// Holds the stream, as a failed NCCL kernel does, until abort or destroy.
void StallUntilReleased(CommState& c) {
  while (!c.released.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// One group's operations of one communicator, on the first one's stream's worker.
void RunTask(const std::shared_ptr<CommState>& c, uint64_t ticket, const std::vector<Op>& ops) {
  // The communicator's operations run in issue order, whatever their streams.
  while (c->completed.load(std::memory_order_acquire) != ticket - 1 && !c->released.load()) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  const int result = c->result.load();
  if (c->released.load()) {
    // aborted or destroyed: nothing runs
  } else if (result != ncclSuccess) {
    StallUntilReleased(*c);
  } else {
    ncclResult_t r = ncclSuccess;
    std::vector<const Op*> p2p;
    for (const Op& op : ops) {
      if (op.kind == kSend || op.kind == kRecv) p2p.push_back(&op);
    }
    if (!p2p.empty()) r = RunPointToPoint(*c, p2p);
    for (const Op& op : ops) {
      if (r != ncclSuccess) break;
      if (op.kind != kSend && op.kind != kRecv) r = RunCollective(*c, op);
    }
    if (r != ncclSuccess) StallUntilReleased(*c);
  }
  c->completed.store(ticket, std::memory_order_release);
  c->pending.fetch_sub(1);
}

// Issues one group's operations of one communicator (each its own stream's turn).
void Launch(const std::shared_ptr<CommState>& c, std::vector<Op> ops) {
  // Captured (graph.cc): the group is issued again at each replay, on the graph's stream.
  const cudaStream_t captured = ops.front().stream;
  if (msemu::Capturing(captured)) {
    for (const Op& op : ops) {
      if (op.stream != captured) {
        msemu::Report("cuda emulator: an NCCL group over several streams inside a stream capture is not emulated");
        return;
      }
    }
    auto replay = [c, ops](cudaStream_t s) {
      std::vector<Op> again = ops;
      for (Op& op : again) op.stream = s;
      Launch(c, std::move(again));
    };
    if (msemu::RecordNode(captured, "nccl group", replay, nullptr, 0, {}, msemu::GraphNode::Type::kOther)) return;
  }
  std::lock_guard<std::mutex> lock(c->issue_mu);
  const uint64_t ticket = ++c->issued;
  c->pending.fetch_add(1);
  auto done = std::make_shared<std::atomic<bool>>(false);
  const cudaStream_t first = ops.front().stream;
  std::vector<cudaStream_t> others;
  for (const Op& op : ops) {
    if (op.stream != first && std::find(others.begin(), others.end(), op.stream) == others.end()) {
      others.push_back(op.stream);
    }
  }
  msemu::Enqueue(first, [c, ticket, ops = std::move(ops), done] {
    RunTask(c, ticket, ops);
    done->store(true);
  });
  // NCCL joins a group's streams: the others wait for the group too.
  for (cudaStream_t s : others) {
    msemu::Enqueue(s, [c, done] {
      while (!done->load() && !c->released.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    });
  }
}

struct GroupState {
  int depth = 0;
  ncclResult_t error = ncclSuccess;
  std::vector<std::pair<std::shared_ptr<CommState>, Op>> ops;
};
thread_local GroupState g_group;

// A communicator usable for a new operation: its error once it failed, invalid argument
// while still initializing (as ncclCommEnsureReady).
ncclResult_t EnsureReady(const std::shared_ptr<CommState>& c, const char* fn) {
  if (c == nullptr) {
    Warn(nullptr, std::string(fn) + ": invalid communicator (NULL, destroyed or aborted)");
    return ncclInvalidArgument;
  }
  const int r = c->result.load();
  if (r == ncclInProgress) {
    Warn(c.get(), std::string(fn) + ": attempt to use the communicator before its initialization completed");
    return ncclInvalidArgument;
  }
  return static_cast<ncclResult_t>(r);
}

// Validates and issues (or, inside a group, collects) one operation.
ncclResult_t Issue(ncclComm_t comm, Op op) {
  const char* fn = KindName(op.kind);
  std::shared_ptr<CommState> c = Lookup(comm);
  ncclResult_t r = EnsureReady(c, fn);
  auto invalid = [&](const std::string& message) {
    Warn(c.get(), std::string(fn) + ": " + message);
    return ncclInvalidArgument;
  };
  if (r == ncclSuccess) {
    const size_t es = TypeSize(op.dtype);
    const size_t bytes = op.count * es;
    const int n = c->nranks;
    if (op.dtype < 0 || op.dtype >= ncclNumTypes) {
      r = invalid("invalid type " + std::to_string(op.dtype));
    } else if (op.dtype == ncclFloat8e4m3 || op.dtype == ncclFloat8e5m2) {
      if (op.kind == kAllReduce || op.kind == kReduceScatter) r = invalid("fp8 reductions are not emulated");
    } else if ((op.kind == kAllReduce || op.kind == kReduceScatter) && (op.redop < 0 || op.redop >= ncclNumOps)) {
      r = invalid("invalid reduction operation " + std::to_string(op.redop));
    } else if (op.root < 0 || op.root >= n) {
      r = invalid(std::string(op.kind == kBroadcast ? "invalid root " : "invalid peer ") + std::to_string(op.root) +
                  " (nranks " + std::to_string(n) + ")");
    }
    if (r == ncclSuccess) {
      bool ok = true;
      switch (op.kind) {
        case kAllReduce:
          ok = CheckBuffer(*c, fn, "sendbuff", op.send, bytes) && CheckBuffer(*c, fn, "recvbuff", op.recv, bytes);
          break;
        case kReduceScatter:
          ok = CheckBuffer(*c, fn, "sendbuff", op.send, bytes * n) && CheckBuffer(*c, fn, "recvbuff", op.recv, bytes);
          break;
        case kAllGather:
          ok = CheckBuffer(*c, fn, "sendbuff", op.send, bytes) && CheckBuffer(*c, fn, "recvbuff", op.recv, bytes * n);
          break;
        case kBroadcast:
          ok = (op.root != c->rank || CheckBuffer(*c, fn, "sendbuff", op.send, bytes)) &&
               CheckBuffer(*c, fn, "recvbuff", op.recv, bytes);
          break;
        case kSend:
          ok = CheckBuffer(*c, fn, "sendbuff", op.send, bytes);
          break;
        case kRecv:
          ok = CheckBuffer(*c, fn, "recvbuff", op.recv, bytes);
          break;
      }
      if (!ok) r = ncclInvalidArgument;
    }
    // Zero-byte sends and receives are no-ops, as in NCCL.
    if (r == ncclSuccess && (op.kind == kSend || op.kind == kRecv) && bytes == 0) return ncclSuccess;
  }
  if (g_group.depth > 0) {
    if (r != ncclSuccess) {
      if (g_group.error == ncclSuccess) g_group.error = r;
    } else {
      g_group.ops.emplace_back(c, op);
    }
    return r;
  }
  if (r != ncclSuccess) return r;
  if ((op.kind == kRecv || op.kind == kSend) && op.root == c->rank) {
    Warn(c.get(), std::string(fn) + " with rank " + std::to_string(op.root) + " (itself) needs the matching " +
                      (op.kind == kRecv ? "ncclSend" : "ncclRecv") + " in the same group");
    return ncclInvalidUsage;
  }
  Launch(c, {op});
  return ncclSuccess;
}

}  // namespace

extern "C" {

// The library's version code (NCCL_VERSION_CODE of the headers compiled against).
ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

// NCCL's fixed texts for each result code.
const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

// The last warning's text, of `comm` or (NULL) of the process, as ncclGetLastError.
const char* ncclGetLastError(ncclComm_t comm) {
  thread_local std::string copy;
  if (std::shared_ptr<CommState> c = Lookup(comm)) {
    std::lock_guard<std::mutex> lock(c->mu);
    copy = c->last_error;
  } else {
    std::lock_guard<std::mutex> lock(g_last_error_mu);
    copy = g_last_error;
  }
  return copy.c_str();
}

// A fresh id naming a shared-memory segment; rank 0 calls it once per communicator
// and passes it to the others (NCCL: "called once ... before calling ncclCommInitRank").
ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id) {
  if (unique_id == nullptr) return ncclInvalidArgument;
  uint8_t random[16];
  size_t got = 0;
  while (got < sizeof(random)) {
    const ssize_t r = getrandom(random + got, sizeof(random) - got, 0);
    if (r < 0 && errno != EINTR) return ncclSystemError;
    if (r > 0) got += static_cast<size_t>(r);
  }
  std::memset(unique_id->internal, 0, sizeof(unique_id->internal));
  std::memcpy(unique_id->internal, kIdMagic, sizeof(kIdMagic));
  char* name = unique_id->internal + sizeof(kIdMagic);
  int len = std::snprintf(name, 64, "/msemu-nccl-");
  for (uint8_t b : random) len += std::snprintf(name + len, 3, "%02x", b);
  return ncclSuccess;
}

// Joins rank `rank` of `nranks` on the current device. config->blocking = 0: returns
// ncclInProgress and completes in the background (ncclCommGetAsyncError says when), as
// NCCL's non-blocking communicators; otherwise completes before returning.
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank,
                                    ncclConfig_t* config) {
  bool blocking = true;
  if (config != nullptr) {
    if (config->magic != 0xcafebeef || config->size < offsetof(ncclConfig_t, cgaClusterSize)) {
      Warn(nullptr, "ncclCommInitRankConfig: config not initialized with NCCL_CONFIG_INITIALIZER");
      return ncclInvalidArgument;
    }
    if (config->blocking != NCCL_CONFIG_UNDEF_INT) blocking = config->blocking != 0;
  }
  return InitRank(comm, nranks, comm_id, rank, blocking);
}

// A blocking ncclCommInitRankConfig with the default config.
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank) {
  return InitRank(comm, nranks, comm_id, rank, true);
}

// ncclInProgress while initializing (or finalizing with work left), then ncclSuccess or
// the communicator's first error; NCCL's polling contract for non-blocking communicators.
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  std::shared_ptr<CommState> c = Lookup(comm);
  if (c == nullptr || async_error == nullptr) return ncclInvalidArgument;
  int r = c->result.load();
  if (r == ncclSuccess && c->finalizing.load() && c->pending.load() > 0) r = ncclInProgress;
  *async_error = static_cast<ncclResult_t>(r);
  return ncclSuccess;
}

// Flushes the issued operations: blocking, waits for them; non-blocking, returns
// ncclInProgress until they are done (NCCL 2.14+ ncclCommFinalize).
ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  std::shared_ptr<CommState> c = Lookup(comm);
  if (c == nullptr) return ncclInvalidArgument;
  c->finalizing = true;
  if (c->blocking) {
    while (c->pending.load() > 0 && c->result.load() == ncclSuccess) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return static_cast<ncclResult_t>(c->result.load());
  }
  const int r = c->result.load();
  if (r != ncclSuccess) return static_cast<ncclResult_t>(r);
  return c->pending.load() > 0 ? ncclInProgress : ncclSuccess;
}

// Frees the communicator after its issued operations (an implicit finalize unless it
// failed); the peers then see it gone. A communicator still initializing is aborted.
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  std::shared_ptr<CommState> c = Take(comm);
  if (c == nullptr) return ncclInvalidArgument;
  const bool initialized = c->result.load() != ncclInProgress;
  while (initialized && c->pending.load() > 0 && c->result.load() == ncclSuccess) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (!initialized) c->aborted = true;
  if (c->base != nullptr) {
    int32_t alive = kAlive;
    c->slot(c->rank)->state.compare_exchange_strong(alive, initialized ? kDestroyed : kAborted);
  }
  c->released = true;
  Unlink(*c);
  return ncclSuccess;
}

// Stops every pending and later operation of the communicator (they end without
// waiting) and frees it, without waiting for peers (NCCL: abort never blocks on them).
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  std::shared_ptr<CommState> c = Take(comm);
  if (c == nullptr) return ncclInvalidArgument;
  c->aborted = true;
  if (c->base != nullptr) c->slot(c->rank)->state.store(kAborted);
  c->released = true;
  Unlink(*c);
  return ncclSuccess;
}

// The number of ranks.
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  std::shared_ptr<CommState> c = Lookup(comm);
  if (c == nullptr || count == nullptr) return ncclInvalidArgument;
  *count = c->nranks;
  return ncclSuccess;
}

// This rank's CUDA device (current at initialization).
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  std::shared_ptr<CommState> c = Lookup(comm);
  if (c == nullptr || device == nullptr) return ncclInvalidArgument;
  *device = c->device;
  return ncclSuccess;
}

// This rank's number.
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  std::shared_ptr<CommState> c = Lookup(comm);
  if (c == nullptr || rank == nullptr) return ncclInvalidArgument;
  *rank = c->rank;
  return ncclSuccess;
}

// recvbuff = the reduction of every rank's sendbuff (count elements), in rank order.
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return Issue(comm, Op{kAllReduce, sendbuff, recvbuff, count, datatype, op, 0, stream});
}

// recvbuff (recvcount) = block `rank` of the reduction of every rank's sendbuff
// (nranks × recvcount), in rank order.
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return Issue(comm, Op{kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0, stream});
}

// recvbuff (nranks × sendcount) = every rank's sendbuff, in rank order.
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return Issue(comm, Op{kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, stream});
}

// recvbuff = root's sendbuff on every rank (sendbuff read on the root only).
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return Issue(comm, Op{kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root, stream});
}

// In-place ncclBroadcast (the legacy name).
ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

// Sends count elements to `peer`, matched in order with peer's ncclRecv from this rank
// (same size and type).
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return Issue(comm, Op{kSend, sendbuff, nullptr, count, datatype, ncclSum, peer, stream});
}

// Receives count elements from `peer` (see ncclSend).
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return Issue(comm, Op{kRecv, nullptr, recvbuff, count, datatype, ncclSum, peer, stream});
}

// Opens a group (nestable): the operations issued until the matching ncclGroupEnd
// progress together.
ncclResult_t ncclGroupStart() {
  ++g_group.depth;
  return ncclSuccess;
}

// Closes a group; the outermost issues its operations, one task per communicator, or
// returns the first error of the group's calls (and issues nothing). A receive from
// itself needs a send to itself in the same group (else ncclInvalidUsage, as NCCL).
ncclResult_t ncclGroupEnd() {
  if (g_group.depth == 0) {
    Warn(nullptr, "ncclGroupEnd: not in a group call");
    return ncclInvalidUsage;
  }
  if (--g_group.depth > 0) return ncclSuccess;
  auto ops = std::move(g_group.ops);
  g_group.ops.clear();
  const ncclResult_t error = g_group.error;
  g_group.error = ncclSuccess;
  if (error != ncclSuccess) return error;
  std::vector<std::pair<std::shared_ptr<CommState>, std::vector<Op>>> tasks;
  for (auto& [c, op] : ops) {
    auto it = std::find_if(tasks.begin(), tasks.end(), [&](const auto& t) { return t.first == c; });
    if (it == tasks.end()) {
      tasks.emplace_back(c, std::vector<Op>{});
      it = tasks.end() - 1;
    }
    it->second.push_back(op);
  }
  for (auto& [c, task_ops] : tasks) {
    std::vector<size_t> self_sends, self_recvs;
    for (const Op& op : task_ops) {
      if (op.root != c->rank) continue;
      if (op.kind == kSend) self_sends.push_back(op.count * TypeSize(op.dtype));
      if (op.kind == kRecv) self_recvs.push_back(op.count * TypeSize(op.dtype));
    }
    if (self_sends != self_recvs) {
      Warn(c.get(), "ncclRecv from rank " + std::to_string(c->rank) +
                        " (itself) without a matching ncclSend of the same size in the same group");
      return ncclInvalidUsage;
    }
  }
  for (auto& [c, task_ops] : tasks) Launch(c, std::move(task_ops));
  return ncclSuccess;
}

}  // extern "C"
