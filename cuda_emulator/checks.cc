// The checkers of the emulated device: what compute-sanitizer's memcheck, initcheck and
// racecheck would find on a GPU, checked on every load and store of kernel code.
//
// The CUDA sources are compiled with GCC's -fsanitize=thread instrumentation
// (cuda_emulator/CMakeLists.txt), which calls __tsan_readN/__tsan_writeN before each
// access. This file defines those hooks itself (libtsan is never linked). Outside
// kernel code (t_checking false) they return at once; inside, each address is one of:
//   - the emulated thread's own stack: registers and local memory, not checked;
//   - shared memory (static __shared__ variables are thread_local statics, so they lie
//     in the host thread's static TLS; dynamic shared memory is the block's buffer):
//     an uninitialized read, or two threads touching one byte between the same two
//     barriers with one of them writing (not ordered by a warp rendezvous when both are
//     in one warp), is a report;
//   - a live device allocation: an access running past its end is a report and ends
//     the launch with cudaErrorIllegalAddress; a read of a byte never written is a
//     report; a write marks the bytes written;
//   - read-only data of the program (constant tables): reads are allowed;
//   - anything else (host memory, freed memory, guard zones): a report and
//     cudaErrorIllegalAddress.
// The atomic hooks forward to the compiler's atomics (host code of these translation
// units uses them too).
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_emulator/emulator.h"
#include "cuda_emulator/internal.h"

namespace msemu {

std::string Format(const char* format, ...) {
  va_list args;
  va_start(args, format);
  char small[512];
  const int n = std::vsnprintf(small, sizeof(small), format, args);
  va_end(args);
  if (n < int(sizeof(small))) return std::string(small, n > 0 ? n : 0);
  std::string out(n, '\0');
  va_start(args, format);
  std::vsnprintf(out.data(), n + 1, format, args);
  va_end(args);
  return out;
}

namespace {

std::mutex g_report_mutex;
std::vector<std::string>* g_capture = nullptr;

bool ContinueAfterReport() {
  static const bool keep_going = [] {
    const char* v = std::getenv("MULTISCREEN_EMULATOR_ON_REPORT");
    return v != nullptr && std::string(v) == "continue";
  }();
  return keep_going;
}

// Program segments that are mapped read-only (code, constant tables).
struct ReadOnlySegments {
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  ReadOnlySegments() {
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* self) {
          auto* ranges = &static_cast<ReadOnlySegments*>(self)->ranges;
          for (int i = 0; i < info->dlpi_phnum; ++i) {
            const ElfW(Phdr)& ph = info->dlpi_phdr[i];
            if (ph.p_type == PT_LOAD && (ph.p_flags & PF_W) == 0) {
              ranges->emplace_back(info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
            }
          }
          return 0;
        },
        this);
  }
  bool Contains(uintptr_t a) const {
    for (const auto& [lo, hi] : ranges) {
      if (a >= lo && a < hi) return true;
    }
    return false;
  }
};

const ReadOnlySegments& TheReadOnlySegments() {
  static const ReadOnlySegments* segments = new ReadOnlySegments();
  return *segments;
}

// Per host thread: its static TLS range, and the allocation the last global access hit.
thread_local uintptr_t t_tls_lo = 0, t_tls_hi = 0;
thread_local Allocation* t_last = nullptr;
thread_local uint64_t t_last_generation = 0;

const char* Verb(bool write) { return write ? "writes" : "reads"; }

// Reports an access outside anything the thread may touch and ends it.
[[noreturn]] void IllegalAccess(uintptr_t a, size_t bytes, bool write, const std::string& what) {
  Report(Format("cuda emulator: invalid global %s: %s %s %zu bytes at %#zx: %s", write ? "write" : "read",
                WhereNow().c_str(), Verb(write), bytes, size_t(a), what.c_str()));
  KillThread(cudaErrorIllegalAddress);
}

std::string ThreadName(int linear) {
  const dim3 d = t_block->dim;
  const int x = linear % int(d.x), y = (linear / int(d.x)) % int(d.y), z = linear / int(d.x * d.y);
  return Format("thread (%d,%d,%d)", x, y, z);
}

// Classifies and checks one access of kernel code (an atomic is a write that also reads
// the old value).
void CheckAccess(uintptr_t a, size_t bytes, bool write, bool atomic) {
  BlockState* b = t_block;
  auto global = [&] {
    if (atomic) CheckGlobal(a, bytes, false);
    CheckGlobal(a, bytes, write);
  };
  if (b->dynamic_shared != nullptr) {
    const uintptr_t lo = reinterpret_cast<uintptr_t>(b->dynamic_shared), hi = lo + b->dynamic_bytes;
    if (a >= lo && a < hi) {
      if (a + bytes > hi) {
        IllegalAccess(a, bytes, write,
                      Format("runs past the end of the block's %zu bytes of dynamic shared memory", b->dynamic_bytes));
      }
      return CheckShared(a, bytes, write, atomic);
    }
    // Near it (an index past either end): named as such rather than as host memory.
    constexpr uintptr_t kNear = uintptr_t(1) << 16;
    if (a >= hi && a < hi + kNear) {
      IllegalAccess(a, bytes, write, Format("%zu bytes past the end of the block's %zu bytes of dynamic shared memory",
                                            size_t(a - hi), b->dynamic_bytes));
    }
    if (a < lo && a + kNear >= lo) {
      IllegalAccess(a, bytes, write, Format("%zu bytes before the start of the block's %zu bytes of dynamic shared memory",
                                            size_t(lo - a), b->dynamic_bytes));
    }
  }
  if (t_tls_hi == 0) StaticTlsRange(&t_tls_lo, &t_tls_hi);
  if (a >= t_tls_lo && a < t_tls_hi) return CheckShared(a, bytes, write, atomic);
  const uint64_t generation = g_heap_generation.load(std::memory_order_relaxed);
  if (t_last != nullptr && t_last_generation == generation && a >= t_last->base && a < t_last->base + t_last->bytes) {
    return global();
  }
  if (Allocation* al = FindAllocation(reinterpret_cast<void*>(a))) {
    t_last = al;
    t_last_generation = generation;
    return global();
  }
  if (!write && TheReadOnlySegments().Contains(a)) return;  // a constant table
  IllegalAccess(a, bytes, write, DescribeAddress(a));
}

inline void Access(void* p, size_t bytes, bool write) {
  if (!t_checking) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (a >= t_thread->stack_lo && a < t_thread->stack_hi) return;  // the thread's own locals
  CheckAccess(a, bytes, write, false);
}

}  // namespace

void CheckAtomic(uintptr_t a, size_t bytes) {
  if (t_checking) CheckAccess(a, bytes, true, true);
}

void Report(const std::string& line) {
  std::lock_guard lock(g_report_mutex);
  if (g_capture != nullptr) {
    g_capture->push_back(line);
    return;
  }
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  if (!ContinueAfterReport()) std::_Exit(86);
}

ScopedCapture::ScopedCapture() {
  std::lock_guard lock(g_report_mutex);
  g_capture = new std::vector<std::string>();
}
ScopedCapture::~ScopedCapture() {
  std::lock_guard lock(g_report_mutex);
  delete g_capture;
  g_capture = nullptr;
}
const std::vector<std::string>& ScopedCapture::reports() const { return *g_capture; }

void CheckGlobal(uintptr_t a, size_t bytes, bool write) {
  Allocation* al = t_last;
  if (al == nullptr || a < al->base || a >= al->base + al->bytes) {
    al = FindAllocation(reinterpret_cast<void*>(a));
    if (al == nullptr) IllegalAccess(a, bytes, write, DescribeAddress(a));
  }
  const size_t offset = a - al->base;
  if (bytes > al->bytes - offset) {
    IllegalAccess(a, bytes, write,
                  Format("offset %zu of a %zu-byte allocation at %#zx: runs %zu bytes past its end", offset, al->bytes,
                         size_t(al->base), offset + bytes - al->bytes));
  }
  if (t_counts != nullptr && t_counts->stamp != 0) CountSectors(al, offset, bytes, write, t_counts);
  uint8_t* flags = al->initialized.data() + offset;
  if (write) {
    std::fill(flags, flags + bytes, uint8_t{1});
    return;
  }
  for (size_t i = 0; i < bytes; ++i) {
    if (flags[i] == 0) {
      Report(Format("cuda emulator: uninitialized global read: %s reads %zu bytes at %#zx (offset %zu of a %zu-byte "
                    "allocation at %#zx), never written",
                    WhereNow().c_str(), bytes, size_t(a), offset, al->bytes, size_t(al->base)));
      std::fill(flags, flags + bytes, uint8_t{1});  // once per address
      return;
    }
  }
}

void CheckShared(uintptr_t a, size_t bytes, bool write, bool atomic) {
  BlockState* b = t_block;
  const ThreadState* t = t_thread;
  const uint32_t epoch = b->epoch, warp_epoch = b->warp_epoch[t->warp];
  // Accesses of another thread ordered before this one within the barrier interval: in
  // this thread's warp, before a warp rendezvous this thread has passed since.
  auto ordered_write = [&](const Shadow& s) {
    return s.writer == t->linear || (s.writer / 32 == t->warp && s.writer_warp_epoch != warp_epoch);
  };
  auto reads_race = [&](const Shadow& s) {
    if (s.read_epoch != epoch || (!s.many_readers && s.reader == t->linear)) return false;
    return !(s.reader_warp == t->warp && s.reader_warp_epoch != warp_epoch);
  };
  auto atomics_race = [&](const Shadow& s) {
    return s.atomic_epoch == epoch && (s.many_atomics || s.atomic_thread != t->linear);
  };
  for (size_t i = 0; i < bytes; ++i) {
    Shadow& s = b->shared[a + i];
    std::string race;
    if ((!write || atomic) && !s.initialized) {  // an atomic reads the old value
      Report(Format("cuda emulator: uninitialized shared read: %s reads %zu bytes at %#zx of shared memory, never "
                    "written by this block",
                    WhereNow().c_str(), bytes, size_t(a)));
      for (size_t j = 0; j < bytes; ++j) b->shared[a + j].initialized = true;  // once per address
      return;
    }
    const bool plain_write_race = s.write_epoch == epoch && !ordered_write(s);
    if (atomic) {  // an atomic races with plain accesses of other threads, not with atomics
      if (plain_write_race) {
        race = Format("%s wrote it plainly", ThreadName(s.writer).c_str());
      } else if (reads_race(s)) {
        race = s.many_readers ? "other threads read it plainly" : Format("%s read it plainly", ThreadName(s.reader).c_str());
      }
    } else if (write) {
      if (plain_write_race) {
        race = Format("%s wrote it", ThreadName(s.writer).c_str());
      } else if (reads_race(s)) {
        race = s.many_readers ? "other threads read it" : Format("%s read it", ThreadName(s.reader).c_str());
      } else if (atomics_race(s)) {
        race = Format("%s updated it atomically", ThreadName(s.atomic_thread).c_str());
      }
    } else {
      if (plain_write_race) {
        race = Format("%s wrote it", ThreadName(s.writer).c_str());
      } else if (atomics_race(s)) {
        race = Format("%s updated it atomically", ThreadName(s.atomic_thread).c_str());
      }
    }
    if (atomic) {
      if (s.atomic_epoch == epoch && s.atomic_thread != t->linear) s.many_atomics = true;
      if (s.atomic_epoch != epoch) {
        s.atomic_epoch = epoch;
        s.atomic_thread = t->linear;
        s.many_atomics = false;
      }
      s.initialized = true;
    } else if (write) {
      s.write_epoch = epoch;
      s.writer = t->linear;
      s.writer_warp_epoch = warp_epoch;
      s.initialized = true;
    } else if (s.read_epoch != epoch) {
      s.read_epoch = epoch;
      s.reader = t->linear;
      s.many_readers = false;
      s.reader_warp = t->warp;
      s.reader_warp_epoch = warp_epoch;
    } else {
      if (s.reader != t->linear) s.many_readers = true;
      if (s.reader_warp != t->warp) s.reader_warp = -2;
      s.reader_warp_epoch = std::max(s.reader_warp_epoch, warp_epoch);
    }
    if (!race.empty()) {
      Report(Format("cuda emulator: race on shared memory: %s %s %zu bytes at %#zx, and %s between the same two "
                    "barriers",
                    WhereNow().c_str(), atomic ? "atomically updates" : Verb(write), bytes, size_t(a), race.c_str()));
      // One report per access: the bytes are this thread's from here.
      for (size_t j = 0; j < bytes; ++j) {
        Shadow& r = b->shared[a + j];
        r.writer = r.reader = r.atomic_thread = t->linear;
        r.many_readers = r.many_atomics = false;
        r.reader_warp = t->warp;
      }
      return;
    }
  }
}

void StaticTlsRange(uintptr_t* lo, uintptr_t* hi) {
  size_t total = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* sum) {
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type == PT_TLS) {
            const size_t align = ph.p_align > 0 ? ph.p_align : 1;
            *static_cast<size_t*>(sum) += (ph.p_memsz + align - 1) / align * align;
          }
        }
        return 0;
      },
      &total);
  // x86-64 (TLS variant II): the static blocks lie just below the thread pointer.
  const uintptr_t tp = reinterpret_cast<uintptr_t>(__builtin_thread_pointer());
  *hi = tp;
  *lo = tp - total - 4096;
}

}  // namespace msemu

// ---- The instrumentation's entry points -------------------------------------------

extern "C" {

void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}

#define MSEMU_ACCESS_HOOKS(n)                                                                  \
  void __tsan_read##n(void* p) { msemu::Access(p, n, false); }                                \
  void __tsan_write##n(void* p) { msemu::Access(p, n, true); }                                \
  void __tsan_unaligned_read##n(void* p) { msemu::Access(p, n, false); }                      \
  void __tsan_unaligned_write##n(void* p) { msemu::Access(p, n, true); }                      \
  void __tsan_volatile_read##n(void* p) { msemu::Access(p, n, false); }                       \
  void __tsan_volatile_write##n(void* p) { msemu::Access(p, n, true); }
MSEMU_ACCESS_HOOKS(1)
MSEMU_ACCESS_HOOKS(2)
MSEMU_ACCESS_HOOKS(4)
MSEMU_ACCESS_HOOKS(8)
MSEMU_ACCESS_HOOKS(16)
#undef MSEMU_ACCESS_HOOKS
void __tsan_read_range(void* p, unsigned long n) { msemu::Access(p, n, false); }
void __tsan_write_range(void* p, unsigned long n) { msemu::Access(p, n, true); }

// Atomics (the memory order argument is the __ATOMIC_* value; seq_cst is always used).
#define MSEMU_ATOMIC_HOOKS(bits, T)                                                                              \
  T __tsan_atomic##bits##_load(const volatile T* a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); }       \
  void __tsan_atomic##bits##_store(volatile T* a, T v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); }      \
  T __tsan_atomic##bits##_exchange(volatile T* a, T v, int) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##bits##_fetch_add(volatile T* a, T v, int) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##bits##_fetch_sub(volatile T* a, T v, int) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##bits##_fetch_and(volatile T* a, T v, int) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##bits##_fetch_or(volatile T* a, T v, int) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }   \
  T __tsan_atomic##bits##_fetch_xor(volatile T* a, T v, int) { return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##bits##_fetch_nand(volatile T* a, T v, int) {                                                \
    return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST);                                                        \
  }                                                                                                            \
  int __tsan_atomic##bits##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {                      \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                    \
  }                                                                                                            \
  int __tsan_atomic##bits##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {                        \
    return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                     \
  }                                                                                                            \
  T __tsan_atomic##bits##_compare_exchange_val(volatile T* a, T c, T v, int, int) {                            \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                          \
    return c;                                                                                                  \
  }
MSEMU_ATOMIC_HOOKS(8, char)
MSEMU_ATOMIC_HOOKS(16, short)
MSEMU_ATOMIC_HOOKS(32, int)
MSEMU_ATOMIC_HOOKS(64, long)
#undef MSEMU_ATOMIC_HOOKS
void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

}  // extern "C"
