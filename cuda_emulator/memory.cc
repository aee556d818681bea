// The emulated devices and their memory (emulator.h): which devices the process sees,
// and every live cudaMalloc with one initialized-flag per byte. Allocations are
// mmap'd between PROT_NONE guard pages, so that even an unchecked access (host code
// handed a device pointer) past either end faults; the kernels' own accesses are
// checked to the byte by checks.cc.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "cuda_emulator/emulator.h"
#include "cuda_emulator/internal.h"

namespace msemu {
namespace {

constexpr int kMaxDevices = 64;

// Node-wide devices (MULTISCREEN_EMULATED_GPUS) and those CUDA_VISIBLE_DEVICES leaves,
// read once.
// The host's available memory in bytes (/proc/meminfo's MemAvailable; else its physical
// memory): what an emulated device's allocations really come from.
size_t HostAvailableBytes() {
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof line, f) != nullptr) found = std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
    std::fclose(f);
    if (found) return static_cast<size_t>(kib) << 10;
  }
  return static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

struct Devices {
  std::vector<int> visible;  // node-wide index of each visible device
  // 80 GiB, or less where the host has less available: the emulated device's memory is
  // the host's, so a command's device-memory check must not pass what the host cannot
  // hold (a fresh-eyes pass: eval ttft --context=50000000 --device=cuda passed the check
  // and grew until the host ran out).
  size_t capacity = std::min(size_t(80) << 30, HostAvailableBytes());
  Devices() {
    int node = 1;
    // Whole numbers only: a typo is said, not read as 0 or as its leading digits.
    auto read = [](const char* name, unsigned long long max, unsigned long long* value) {
      const char* text = std::getenv(name);
      if (text == nullptr || *text == '\0') return;
      char* end = nullptr;
      errno = 0;
      const unsigned long long v = std::strtoull(text, &end, 10);
      if (*end != '\0' || errno != 0 || v > max || text[0] == '-') {
        Report(Format("cuda emulator: %s=%s: expected a whole number from 0 to %llu", name, text, max));
        return;
      }
      *value = v;
    };
    unsigned long long gpus = 1, bytes = capacity;
    read("MULTISCREEN_EMULATED_GPUS", kMaxDevices, &gpus);
    read("MULTISCREEN_EMULATED_GPU_MEMORY", uint64_t(1) << 50, &bytes);
    node = static_cast<int>(gpus);
    capacity = static_cast<size_t>(bytes);
    const char* list = std::getenv("CUDA_VISIBLE_DEVICES");
    if (list == nullptr) {
      for (int i = 0; i < node; ++i) visible.push_back(i);
      return;
    }
    // As CUDA reads it: comma-separated indices; the list ends at the first entry that
    // is not a valid index (a repeated one included).
    const char* p = list;
    while (*p != '\0') {
      char* end = nullptr;
      const long index = std::strtol(p, &end, 10);
      if (end == p || index < 0 || index >= node ||
          std::find(visible.begin(), visible.end(), int(index)) != visible.end()) {
        break;
      }
      visible.push_back(int(index));
      p = end;
      while (*p == ' ') ++p;
      if (*p == ',') ++p;
    }
  }
};

Devices& TheDevices() {
  static Devices* devices = new Devices();  // never destroyed: worker threads may outlive main
  return *devices;
}

thread_local int t_device = 0;

// Live allocations by base address, and bytes in use per device.
struct Heap {
  std::shared_mutex mutex;
  std::map<uintptr_t, std::unique_ptr<Allocation>> live;
  size_t used[kMaxDevices] = {};
};
Heap& TheHeap() {
  static Heap* heap = new Heap();
  return *heap;
}

size_t PageSize() {
  static const size_t page = size_t(sysconf(_SC_PAGESIZE));
  return page;
}
constexpr size_t kSector = 32;  // bytes per counted sector (a DRAM/L2 sector of a GPU)

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Mapped bytes of an allocation of `bytes`: a guard page, the data pages, a guard page.
size_t MappedBytes(size_t bytes) { return RoundUp(bytes, PageSize()) + 2 * PageSize(); }

// The allocation holding p, with the heap's lock held by the caller.
Allocation* FindLocked(Heap& heap, uintptr_t p) {
  auto it = heap.live.upper_bound(p);
  if (it == heap.live.begin()) return nullptr;
  --it;
  Allocation* a = it->second.get();
  return p < a->base + a->bytes ? a : nullptr;
}

}  // namespace

std::atomic<uint64_t> g_heap_generation{0};

int VisibleDeviceCount() { return static_cast<int>(TheDevices().visible.size()); }
int CurrentDevice() { return t_device; }
void SetCurrentDevice(int device) { t_device = device; }
int NodeDeviceIndex(int device) {
  const std::vector<int>& v = TheDevices().visible;
  return device >= 0 && device < int(v.size()) ? v[device] : -1;
}
std::string PciBusId(int node_index) {
  char id[32];
  std::snprintf(id, sizeof(id), "0000:%02X:00.0", 0x18 + node_index);
  return id;
}

void* DeviceAllocate(size_t bytes) {
  Heap& heap = TheHeap();
  const int device = CurrentDevice();
  {
    std::shared_lock lock(heap.mutex);
    if (heap.used[device] + bytes > TheDevices().capacity) return nullptr;
  }
  const size_t mapped = MappedBytes(bytes);
  void* region = mmap(nullptr, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (region == MAP_FAILED) return nullptr;
  char* data = static_cast<char*>(region) + PageSize();
  if (mprotect(data, RoundUp(bytes, PageSize()), PROT_READ | PROT_WRITE) != 0) {
    munmap(region, mapped);
    return nullptr;
  }
  std::memset(data, 0xff, bytes);  // NaN in every float format: a read of it shows
  auto a = std::make_unique<Allocation>();
  a->base = reinterpret_cast<uintptr_t>(data);
  a->bytes = bytes;
  a->device = device;
  static std::atomic<uint64_t> serials{0};
  a->serial = serials.fetch_add(1) + 1;
  a->initialized.assign(bytes, 0);
  if (Counting()) a->sectors.assign((bytes + kSector - 1) / kSector, 0);
  std::unique_lock lock(heap.mutex);
  heap.used[device] += bytes;
  heap.live.emplace(a->base, std::move(a));
  return data;
}

bool DeviceFree(void* p) {
  Heap& heap = TheHeap();
  std::unique_ptr<Allocation> a;
  {
    std::unique_lock lock(heap.mutex);
    auto it = heap.live.find(reinterpret_cast<uintptr_t>(p));
    if (it == heap.live.end()) return false;
    a = std::move(it->second);
    heap.live.erase(it);
    heap.used[a->device] -= a->bytes;
    g_heap_generation.fetch_add(1);
  }
  munmap(reinterpret_cast<char*>(a->base) - PageSize(), MappedBytes(a->bytes));
  return true;
}

void FreeAllAllocations() {
  std::vector<void*> mine;
  {
    Heap& heap = TheHeap();
    std::shared_lock lock(heap.mutex);
    for (const auto& [base, a] : heap.live) {
      if (a->device == CurrentDevice()) mine.push_back(reinterpret_cast<void*>(base));
    }
  }
  for (void* p : mine) DeviceFree(p);
}

void DeviceMemoryInfo(size_t* free_bytes, size_t* total_bytes) {
  Heap& heap = TheHeap();
  std::shared_lock lock(heap.mutex);
  const size_t capacity = TheDevices().capacity, used = heap.used[CurrentDevice()];
  *total_bytes = capacity;
  *free_bytes = used < capacity ? capacity - used : 0;
}

Allocation* FindAllocation(const void* p) {
  Heap& heap = TheHeap();
  std::shared_lock lock(heap.mutex);
  return FindLocked(heap, reinterpret_cast<uintptr_t>(p));
}

std::string DescribeAddress(uintptr_t p) {
  Heap& heap = TheHeap();
  std::shared_lock lock(heap.mutex);
  if (Allocation* a = FindLocked(heap, p)) {
    return Format("offset %zu of a %zu-byte allocation at %#zx", size_t(p - a->base), a->bytes, size_t(a->base));
  }
  // Nearest allocation below and above, within a page: past an end or before a start.
  auto above = heap.live.upper_bound(p);
  if (above != heap.live.begin()) {
    const Allocation* below = std::prev(above)->second.get();
    if (p - (below->base + below->bytes) < PageSize()) {
      const size_t gap = p - (below->base + below->bytes);
      return gap == 0 ? Format("just past the end of a %zu-byte allocation at %#zx", below->bytes, size_t(below->base))
                      : Format("%zu bytes past the end of a %zu-byte allocation at %#zx", gap, below->bytes,
                               size_t(below->base));
    }
  }
  if (above != heap.live.end() && above->first - p <= PageSize()) {
    return Format("%zu bytes before a %zu-byte allocation at %#zx", size_t(above->first - p), above->second->bytes,
                  size_t(above->first));
  }
  return Format("%#zx, which is not device memory (a host address, or freed)", size_t(p));
}

std::string DescribeBadDeviceRange(const void* p, size_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (p == nullptr) return "a null pointer";
  Heap& heap = TheHeap();
  {
    std::shared_lock lock(heap.mutex);
    if (const Allocation* al = FindLocked(heap, a)) {
      if (bytes <= al->bytes - (a - al->base)) return "";
      return Format("%zu bytes at offset %zu of a %zu-byte allocation at %#zx run %zu bytes past its end", bytes,
                    size_t(a - al->base), al->bytes, size_t(al->base), size_t(a - al->base + bytes - al->bytes));
    }
  }
  return DescribeAddress(a);
}

void MarkInitialized(const void* p, size_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  Heap& heap = TheHeap();
  std::shared_lock lock(heap.mutex);
  Allocation* al = FindLocked(heap, a);
  if (al == nullptr) return;
  const size_t offset = a - al->base, n = std::min(bytes, al->bytes - offset);
  std::memset(al->initialized.data() + offset, 1, n);
}

int64_t FirstUninitialized(const void* p, size_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  Heap& heap = TheHeap();
  std::shared_lock lock(heap.mutex);
  const Allocation* al = FindLocked(heap, a);
  if (al == nullptr) return -1;
  const size_t offset = a - al->base, n = std::min(bytes, al->bytes - offset);
  const uint8_t* flags = al->initialized.data() + offset;
  const void* zero = std::memchr(flags, 0, n);
  return zero == nullptr ? -1 : static_cast<const uint8_t*>(zero) - flags;
}

void CopyInitialized(void* dst, const void* src, size_t bytes) {
  Heap& heap = TheHeap();
  std::shared_lock lock(heap.mutex);
  Allocation* d = FindLocked(heap, reinterpret_cast<uintptr_t>(dst));
  const Allocation* s = FindLocked(heap, reinterpret_cast<uintptr_t>(src));
  if (d == nullptr) return;
  const size_t d_off = reinterpret_cast<uintptr_t>(dst) - d->base, n = std::min(bytes, d->bytes - d_off);
  if (s == nullptr) {
    std::memset(d->initialized.data() + d_off, 1, n);
    return;
  }
  const size_t s_off = reinterpret_cast<uintptr_t>(src) - s->base;
  std::memmove(d->initialized.data() + d_off, s->initialized.data() + s_off, std::min(n, s->bytes - s_off));
}

void CountSectors(Allocation* al, size_t offset, size_t bytes, bool write, CallCounts* counts) {
  if (counts == nullptr || counts->stamp == 0 || al->sectors.empty() || bytes == 0) return;
  const uint32_t stamp = counts->stamp << 2, bit = write ? 2u : 1u;
  uint64_t fresh = 0;
  uint32_t* marks = al->sectors.data();
  for (size_t s = offset / kSector, last = (offset + bytes - 1) / kSector; s <= last; ++s) {
    uint32_t m = marks[s];
    if ((m & ~3u) != stamp) m = stamp;
    if ((m & bit) == 0) {
      ++fresh;
      marks[s] = m | bit;
    }
  }
  (write ? counts->bytes_written : counts->bytes_read) += fresh * kSector;
}

void CountSectors(const void* p, size_t bytes, bool write, CallCounts* counts) {
  if (counts == nullptr || counts->stamp == 0 || bytes == 0) return;
  Allocation* al = FindAllocation(p);
  if (al == nullptr) return;
  const size_t offset = reinterpret_cast<uintptr_t>(p) - al->base;
  CountSectors(al, offset, std::min(bytes, al->bytes - offset), write, counts);
}

void EnableSectorMarks() {
  Heap& heap = TheHeap();
  std::unique_lock lock(heap.mutex);
  for (auto& [base, a] : heap.live) {
    if (a->sectors.empty()) a->sectors.assign((a->bytes + kSector - 1) / kSector, 0);
  }
}

}  // namespace msemu
