// The CUDA runtime API on the emulated device: the cuda* calls the project makes, with
// their documented semantics. Kernels, copies and memsets run at once on the calling
// thread after the stream's queued work (NCCL collectives, host functions), which runs
// on the stream's own worker thread; so a stream's work happens in issue order, and
// cudaStreamQuery/cudaEventQuery say "not ready" while queued work runs. Errors: the
// last error per host thread (cudaGetLastError clears it) and the process's sticky
// error (an illegal address in a kernel: every later call returns it). A host pointer
// where the API needs a device pointer, or the reverse, is a report (emulator.h) and
// cudaErrorInvalidValue, where a GPU would fault or fail.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cuda_emulator/emulator.h"
#include "cuda_emulator/internal.h"

// The runtime's opaque handles.
struct CUstream_st {
  unsigned flags = cudaStreamDefault;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::function<void()>> queue;
  bool busy = false, worker = false;
  uint64_t enqueued = 0, completed = 0;
};

struct CUevent_st {
  unsigned flags = cudaEventDefault;
  CUstream_st* stream = nullptr;
  uint64_t ticket = 0;  // complete once stream->completed reaches it
  std::chrono::steady_clock::time_point time{};
};

namespace msemu {
namespace {

thread_local cudaError_t t_last_error = cudaSuccess;
std::atomic<cudaError_t> g_sticky{cudaSuccess};

// cudaMallocHost's blocks by start → end: host memory a cudaMemcpyAsync reads or writes
// asynchronously. Any other host memory is pageable: the real driver stages such a copy
// through a pinned buffer of its own (for an upload, before the call returns), so it is
// counted under its own name (kPageableCopy).
std::mutex g_pinned_mutex;
std::map<uintptr_t, uintptr_t>& PinnedBlocks() {
  static auto* blocks = new std::map<uintptr_t, uintptr_t>();
  return *blocks;
}
bool IsPinned(const void* p, size_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard lock(g_pinned_mutex);
  auto it = PinnedBlocks().upper_bound(a);
  if (it == PinnedBlocks().begin()) return false;
  --it;
  return a >= it->first && a + bytes <= it->second;
}
constexpr const char* kPageableCopy = "cudaMemcpyAsync (pageable host memory)";

// Streams: the legacy default stream, the per-thread one, and every created stream.
std::mutex g_streams_mutex;
std::vector<CUstream_st*>& Streams() {
  static auto* streams = new std::vector<CUstream_st*>();
  return *streams;
}
CUstream_st* Legacy() {
  static CUstream_st* legacy = new CUstream_st();
  return legacy;
}
CUstream_st* PerThread() {
  static CUstream_st* per_thread = new CUstream_st();
  return per_thread;
}
CUstream_st* Resolve(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy) return Legacy();
  if (stream == cudaStreamPerThread) return PerThread();
  return stream;
}

void Worker(CUstream_st* s) {
  std::unique_lock lock(s->mutex);
  for (;;) {
    s->changed.wait(lock, [s] { return !s->queue.empty(); });
    std::function<void()> work = std::move(s->queue.front());
    s->queue.pop_front();
    s->busy = true;
    lock.unlock();
    work();
    lock.lock();
    s->busy = false;
    ++s->completed;
    s->changed.notify_all();
  }
}

void WaitOne(CUstream_st* s) {
  std::unique_lock lock(s->mutex);
  s->changed.wait(lock, [s] { return s->queue.empty() && !s->busy; });
}

bool Idle(CUstream_st* s) {
  std::lock_guard lock(s->mutex);
  return s->queue.empty() && !s->busy;
}

cudaError_t Fail(cudaError_t e) {
  t_last_error = e;
  return e;
}

// The sticky error, if any, as every call returns it.
#define MSEMU_RETURN_IF_STICKY()                                       \
  do {                                                                 \
    if (const cudaError_t sticky_ = ::msemu::StickyError(); sticky_ != cudaSuccess) return ::msemu::Fail(sticky_); \
  } while (0)

bool IsDevice(const void* p, size_t bytes) { return DescribeBadDeviceRange(p, bytes).empty(); }
bool IsDeviceAddress(const void* p) { return FindAllocation(p) != nullptr; }

// Checks the pointers of a copy of `kind`; reports and returns false when they are not
// what the kind says.
bool CheckCopy(const char* api, void* dst, const void* src, size_t bytes, cudaMemcpyKind* kind) {
  if (*kind == cudaMemcpyDefault) {
    const bool d = IsDeviceAddress(dst), s = IsDeviceAddress(src);
    *kind = d ? (s ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
              : (s ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  }
  const bool dst_device = *kind == cudaMemcpyHostToDevice || *kind == cudaMemcpyDeviceToDevice;
  const bool src_device = *kind == cudaMemcpyDeviceToHost || *kind == cudaMemcpyDeviceToDevice;
  if (*kind < cudaMemcpyHostToHost || *kind > cudaMemcpyDefault) {
    Report(Format("cuda emulator: %s: kind %d is not a cudaMemcpyKind", api, int(*kind)));
    return false;
  }
  for (const auto& [p, device, role] : {std::tuple<const void*, bool, const char*>{dst, dst_device, "destination"},
                                        std::tuple<const void*, bool, const char*>{src, src_device, "source"}}) {
    if (device) {
      if (const std::string bad = DescribeBadDeviceRange(p, bytes); !bad.empty()) {
        Report(Format("cuda emulator: %s: the %s of %zu bytes must be device memory: %s", api, role, bytes,
                      bad.c_str()));
        return false;
      }
    } else if (IsDeviceAddress(p)) {
      Report(Format("cuda emulator: %s: the %s %p is device memory, but the kind says host memory", api, role, p));
      return false;
    }
  }
  return true;
}

void Copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  std::memmove(dst, src, bytes);
  if (kind == cudaMemcpyHostToDevice) MarkInitialized(dst, bytes);
  if (kind == cudaMemcpyDeviceToDevice) CopyInitialized(dst, src, bytes);
}

cudaError_t MemcpyOn(const char* api, cudaStream_t stream, void* dst, const void* src, size_t bytes,
                     cudaMemcpyKind kind) {
  MSEMU_RETURN_IF_STICKY();
  if (bytes == 0) return cudaSuccess;
  if (!CheckCopy(api, dst, src, bytes, &kind)) return Fail(cudaErrorInvalidValue);
  if (std::string_view(api) == "cudaMemcpy") {  // blocking, on the legacy stream
    if (const cudaError_t e = CaptureForbids(nullptr, cudaErrorStreamCaptureImplicit); e != cudaSuccess) return Fail(e);
  } else if (RecordNode(stream, api, [=](cudaStream_t s) { MemcpyOn(api, s, dst, src, bytes, kind); }, nullptr, 0,
                        {dst, src}, GraphNode::Type::kMemcpy, int(kind))) {
    return cudaSuccess;
  } else if (const cudaError_t e = LegacyWorkDuringCapture(stream); e != cudaSuccess) {
    return Fail(e);
  }
  WaitStream(stream);
  CallCounts counts{.stamp = NextCountStamp()};
  if (kind == cudaMemcpyDeviceToDevice) {
    CountSectors(src, bytes, false, &counts);
    CountSectors(dst, bytes, true, &counts);
  }
  // A cudaMemcpy to the host returns once the device's work before it and the copy are
  // done: a host synchronization (cudaMemcpyAsync's waits are counted where the host
  // waits for them, cudaStreamSynchronize).
  const bool blocking_to_host = kind == cudaMemcpyDeviceToHost && std::string_view(api) == "cudaMemcpy";
  const bool pageable = std::string_view(api) == "cudaMemcpyAsync" && kind != cudaMemcpyDeviceToDevice &&
                        !IsPinned(kind == cudaMemcpyHostToDevice ? src : dst, bytes);
  AddWork(pageable ? kPageableCopy : api, WorkTally{.kind = WorkKind::kCopy, .calls = 1, .bytes = bytes,
                         .bytes_to_host = kind == cudaMemcpyDeviceToHost ? bytes : 0,
                         .bytes_to_device = kind == cudaMemcpyHostToDevice ? bytes : 0,
                         .syncs = blocking_to_host ? 1u : 0u, .bytes_read = counts.bytes_read,
                         .bytes_written = counts.bytes_written});
  Copy(dst, src, bytes, kind);
  return cudaSuccess;
}

// One host synchronization by `api` (the host waits for the device).
void CountSync(const char* api) { AddWork(api, WorkTally{.kind = WorkKind::kSync, .calls = 1, .syncs = 1}); }

cudaError_t MemsetOn(const char* api, cudaStream_t stream, void* dst, int value, size_t bytes) {
  MSEMU_RETURN_IF_STICKY();
  if (bytes == 0) return cudaSuccess;
  if (const std::string bad = DescribeBadDeviceRange(dst, bytes); !bad.empty()) {
    Report(Format("cuda emulator: %s: the %zu bytes to set must be device memory: %s", api, bytes, bad.c_str()));
    return Fail(cudaErrorInvalidValue);
  }
  if (std::string_view(api) == "cudaMemset") {  // on the legacy stream
    if (const cudaError_t e = CaptureForbids(nullptr, cudaErrorStreamCaptureImplicit); e != cudaSuccess) return Fail(e);
  } else if (RecordNode(stream, api, [=](cudaStream_t s) { MemsetOn(api, s, dst, value, bytes); }, nullptr, 0, {dst},
                        GraphNode::Type::kMemset)) {
    return cudaSuccess;
  } else if (const cudaError_t e = LegacyWorkDuringCapture(stream); e != cudaSuccess) {
    return Fail(e);
  }
  WaitStream(stream);
  CallCounts counts{.stamp = NextCountStamp()};
  CountSectors(dst, bytes, true, &counts);
  AddWork(api, WorkTally{.kind = WorkKind::kMemset, .calls = 1, .bytes = bytes, .bytes_written = counts.bytes_written});
  std::memset(dst, value, bytes);
  MarkInitialized(dst, bytes);
  return cudaSuccess;
}

bool EventComplete(const CUevent_st* e) {
  if (e->stream == nullptr) return true;
  std::lock_guard lock(e->stream->mutex);
  return e->stream->completed >= e->ticket;
}

void WaitEvent(const CUevent_st* e) {
  if (e->stream == nullptr) return;
  std::unique_lock lock(e->stream->mutex);
  e->stream->changed.wait(lock, [e] { return e->stream->completed >= e->ticket; });
}

}  // namespace

void SetLastError(cudaError_t error) { t_last_error = error; }
void SetStickyError(cudaError_t error) {
  cudaError_t expected = cudaSuccess;
  g_sticky.compare_exchange_strong(expected, error);
  t_last_error = error;
}
cudaError_t StickyError() { return g_sticky.load(); }
void ClearStickyError() { g_sticky.store(cudaSuccess); }

void Enqueue(cudaStream_t stream, std::function<void()> work) {
  CUstream_st* s = Resolve(stream);
  std::lock_guard lock(s->mutex);
  if (!s->worker) {
    s->worker = true;
    std::thread(Worker, s).detach();  // streams live as long as the process
  }
  s->queue.push_back(std::move(work));
  ++s->enqueued;
  s->changed.notify_all();
}

void WaitStream(cudaStream_t stream) {
  CUstream_st* s = Resolve(stream);
  WaitOne(s);
  if (s != Legacy()) return;
  // The legacy stream waits for every blocking stream's work (and they for its, which
  // is done: it runs at issue).
  std::vector<CUstream_st*> blocking;
  {
    std::lock_guard lock(g_streams_mutex);
    for (CUstream_st* t : Streams()) {
      if ((t->flags & cudaStreamNonBlocking) == 0) blocking.push_back(t);
    }
  }
  for (CUstream_st* t : blocking) WaitOne(t);
}

bool StreamIdle(cudaStream_t stream) { return Idle(Resolve(stream)); }

void WaitAllStreams() {
  std::vector<CUstream_st*> all{Legacy(), PerThread()};
  {
    std::lock_guard lock(g_streams_mutex);
    all.insert(all.end(), Streams().begin(), Streams().end());
  }
  for (CUstream_st* s : all) WaitOne(s);
}

}  // namespace msemu

using msemu::Fail;

extern "C" {

// ---- Errors ------------------------------------------------------------------------

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureIsolation: return "cudaErrorStreamCaptureIsolation";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    case cudaErrorCapturedEvent: return "cudaErrorCapturedEvent";
    case cudaErrorStreamCaptureMerge: return "cudaErrorStreamCaptureMerge";
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {  // the runtime's own texts
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorIllegalState: return "the resource is not in a valid state to perform the requested operation";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureIsolation:
      return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureMerge: return "operation would result in a merge of separate capture sequences";
    default: return "unknown error";
  }
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = msemu::t_last_error;
  msemu::t_last_error = cudaSuccess;
  const cudaError_t sticky = msemu::g_sticky.load();
  return sticky != cudaSuccess ? sticky : e;
}

cudaError_t cudaPeekAtLastError() {
  const cudaError_t sticky = msemu::g_sticky.load();
  return sticky != cudaSuccess ? sticky : msemu::t_last_error;
}

// ---- Devices -----------------------------------------------------------------------

cudaError_t cudaDriverGetVersion(int* version) {
  if (version == nullptr) return Fail(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  if (version == nullptr) return Fail(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return Fail(cudaErrorInvalidValue);
  *count = msemu::VisibleDeviceCount();
  return *count == 0 ? Fail(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (msemu::VisibleDeviceCount() == 0) return Fail(cudaErrorNoDevice);
  if (device < 0 || device >= msemu::VisibleDeviceCount()) return Fail(cudaErrorInvalidDevice);
  msemu::SetCurrentDevice(device);
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return Fail(cudaErrorInvalidValue);
  if (msemu::VisibleDeviceCount() == 0) return Fail(cudaErrorNoDevice);
  *device = msemu::CurrentDevice();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return Fail(cudaErrorInvalidValue);
  if (device < 0 || device >= msemu::VisibleDeviceCount()) return Fail(cudaErrorInvalidDevice);
  size_t free_bytes = 0, total = 0;
  msemu::DeviceMemoryInfo(&free_bytes, &total);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof(prop->name), "Emulated NVIDIA H100/H200-like sm_90 (cuda_emulator)");
  prop->totalGlobalMem = total;
  prop->sharedMemPerBlock = size_t(48) << 10;
  prop->sharedMemPerBlockOptin = size_t(227) << 10;
  prop->sharedMemPerMultiprocessor = size_t(228) << 10;
  prop->regsPerBlock = prop->regsPerMultiprocessor = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->totalConstMem = 65536;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->l2CacheSize = 50 << 20;
  prop->memoryBusWidth = 6144;
  prop->unifiedAddressing = 1;
  prop->concurrentKernels = 1;
  prop->pciDomainID = 0;
  prop->pciBusID = 0x18 + msemu::NodeDeviceIndex(device);
  prop->pciDeviceID = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (value == nullptr) return Fail(cudaErrorInvalidValue);
  cudaDeviceProp prop;
  if (const cudaError_t e = cudaGetDeviceProperties(&prop, device); e != cudaSuccess) return e;
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = prop.maxThreadsPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = int(prop.sharedMemPerBlock); break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = int(prop.sharedMemPerBlockOptin); break;
    case cudaDevAttrMultiProcessorCount: *value = prop.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *value = prop.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = prop.minor; break;
    case cudaDevAttrWarpSize: *value = prop.warpSize; break;
    case cudaDevAttrPciBusId: *value = prop.pciBusID; break;
    case cudaDevAttrPciDomainId: *value = prop.pciDomainID; break;
    default: return Fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int device) {
  if (id == nullptr || len <= 0) return Fail(cudaErrorInvalidValue);
  if (device < 0 || device >= msemu::VisibleDeviceCount()) return Fail(cudaErrorInvalidDevice);
  std::snprintf(id, size_t(len), "%s", msemu::PciBusId(msemu::NodeDeviceIndex(device)).c_str());
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  MSEMU_RETURN_IF_STICKY();
  if (const cudaError_t e = msemu::CaptureForbids(nullptr, cudaErrorStreamCaptureUnsupported);
      e != cudaSuccess) {
    return Fail(e);
  }
  msemu::CountSync("cudaDeviceSynchronize");
  msemu::WaitAllStreams();
  return cudaSuccess;
}

// Destroys the device's context, as documented: every allocation is freed and the
// sticky error cleared (tests that plant a fault start afresh with it).
cudaError_t cudaDeviceReset() {
  msemu::WaitAllStreams();
  msemu::FreeAllAllocations();
  msemu::ClearStickyError();
  msemu::t_last_error = cudaSuccess;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  if (free_bytes == nullptr || total == nullptr) return Fail(cudaErrorInvalidValue);
  msemu::DeviceMemoryInfo(free_bytes, total);
  return cudaSuccess;
}

// ---- Memory ------------------------------------------------------------------------

cudaError_t cudaMalloc(void** p, size_t bytes) {
  MSEMU_RETURN_IF_STICKY();
  if (p == nullptr) return Fail(cudaErrorInvalidValue);
  if (msemu::VisibleDeviceCount() == 0) return Fail(cudaErrorNoDevice);
  *p = nullptr;
  if (const cudaError_t e = msemu::CaptureForbids(nullptr, cudaErrorStreamCaptureUnsupported);
      e != cudaSuccess) {
    return Fail(e);
  }
  if (bytes == 0) return cudaSuccess;
  *p = msemu::DeviceAllocate(bytes);
  return *p == nullptr ? Fail(cudaErrorMemoryAllocation) : cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  MSEMU_RETURN_IF_STICKY();
  if (p == nullptr) return cudaSuccess;
  if (const cudaError_t e = msemu::CaptureForbids(nullptr, cudaErrorStreamCaptureUnsupported);
      e != cudaSuccess) {
    return Fail(e);
  }
  msemu::WaitAllStreams();  // cudaFree synchronizes the device
  if (!msemu::DeviceFree(p)) {
    msemu::Report(msemu::Format("cuda emulator: cudaFree(%p): not a pointer cudaMalloc returned (%s)", p,
                                msemu::DescribeAddress(reinterpret_cast<uintptr_t>(p)).c_str()));
    return Fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** p, size_t bytes) {
  if (p == nullptr) return Fail(cudaErrorInvalidValue);
  // Page-aligned, as the driver's page-locked allocations are.
  constexpr size_t kPage = 4096;
  *p = std::aligned_alloc(kPage, (std::max<size_t>(bytes, 1) + kPage - 1) / kPage * kPage);
  if (*p == nullptr) return Fail(cudaErrorMemoryAllocation);
  std::lock_guard lock(msemu::g_pinned_mutex);
  msemu::PinnedBlocks()[reinterpret_cast<uintptr_t>(*p)] = reinterpret_cast<uintptr_t>(*p) + bytes;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* p) {
  {
    std::lock_guard lock(msemu::g_pinned_mutex);
    msemu::PinnedBlocks().erase(reinterpret_cast<uintptr_t>(p));
  }
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return msemu::MemcpyOn("cudaMemcpy", nullptr, dst, src, bytes, kind);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  return msemu::MemcpyOn("cudaMemcpyAsync", stream, dst, src, bytes, kind);
}

cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  return msemu::MemsetOn("cudaMemset", nullptr, dst, value, bytes);
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  return msemu::MemsetOn("cudaMemsetAsync", stream, dst, value, bytes);
}

// ---- Streams and events --------------------------------------------------------------

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (stream == nullptr || (flags & ~unsigned(cudaStreamNonBlocking)) != 0) return Fail(cudaErrorInvalidValue);
  auto* s = new CUstream_st();
  s->flags = flags;
  std::lock_guard lock(msemu::g_streams_mutex);
  msemu::Streams().push_back(s);
  *stream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    return Fail(cudaErrorInvalidResourceHandle);
  }
  // Queued work still completes (as documented); the stream object stays for its worker.
  std::lock_guard lock(msemu::g_streams_mutex);
  auto& all = msemu::Streams();
  all.erase(std::remove(all.begin(), all.end(), stream), all.end());
  return cudaSuccess;
}

cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned* flags) {
  if (flags == nullptr) return Fail(cudaErrorInvalidValue);
  *flags = msemu::Resolve(stream)->flags;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (msemu::Capturing(stream)) {
    return Fail(msemu::CaptureForbids(stream, cudaErrorStreamCaptureUnsupported));
  }
  msemu::CountSync("cudaStreamSynchronize");
  msemu::WaitStream(stream);
  MSEMU_RETURN_IF_STICKY();
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  MSEMU_RETURN_IF_STICKY();
  if (msemu::Capturing(stream)) {
    return Fail(msemu::CaptureForbids(stream, cudaErrorStreamCaptureUnsupported));
  }
  return msemu::StreamIdle(stream) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* data) {
  MSEMU_RETURN_IF_STICKY();
  if (fn == nullptr) return Fail(cudaErrorInvalidValue);
  if (const cudaError_t e = msemu::LegacyWorkDuringCapture(stream); e != cudaSuccess) return Fail(e);
  auto replay = [fn, data](cudaStream_t s) { msemu::Enqueue(s, [fn, data] { fn(data); }); };
  if (msemu::RecordNode(stream, "cudaLaunchHostFunc", replay, nullptr, 0, {}, msemu::GraphNode::Type::kHost)) {
    return cudaSuccess;
  }
  msemu::Enqueue(stream, [fn, data] { fn(data); });
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  if (event == nullptr) return Fail(cudaErrorInvalidValue);
  auto* e = new CUevent_st();
  e->flags = flags;
  *event = e;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  msemu::CountSync("cudaEventSynchronize");
  msemu::WaitEvent(event);
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  MSEMU_RETURN_IF_STICKY();
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  if (msemu::Capturing(stream)) {  // a dependency inside the capture, not a node (cudaEventRecordExternal's)
    msemu::NoteCapturedEvent(stream, event);
    return cudaSuccess;
  }
  if (const cudaError_t e = msemu::LegacyWorkDuringCapture(stream); e != cudaSuccess) return Fail(e);
  msemu::ForgetCapturedEvent(event);
  CUstream_st* s = msemu::Resolve(stream);
  if (msemu::Idle(s)) {  // everything before it is done
    event->stream = nullptr;
    event->time = std::chrono::steady_clock::now();
    return cudaSuccess;
  }
  msemu::Enqueue(stream, [event] { event->time = std::chrono::steady_clock::now(); });
  std::lock_guard lock(s->mutex);
  event->stream = s;
  event->ticket = s->enqueued;
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  MSEMU_RETURN_IF_STICKY();
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = msemu::CapturedEventUse(event, nullptr); e != cudaSuccess) return Fail(e);
  return msemu::EventComplete(event) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = msemu::CapturedEventUse(event, nullptr); e != cudaSuccess) return Fail(e);
  msemu::CountSync("cudaEventSynchronize");
  msemu::WaitEvent(event);
  MSEMU_RETURN_IF_STICKY();
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr || start == nullptr || end == nullptr) return Fail(cudaErrorInvalidValue);
  if ((start->flags & cudaEventDisableTiming) != 0 || (end->flags & cudaEventDisableTiming) != 0) {
    return Fail(cudaErrorInvalidResourceHandle);
  }
  if (!msemu::EventComplete(start) || !msemu::EventComplete(end)) return Fail(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  MSEMU_RETURN_IF_STICKY();
  if (event == nullptr || flags != 0) return Fail(cudaErrorInvalidValue);
  if (const cudaError_t e = msemu::CapturedEventUse(event, stream); e != cudaSuccess) return Fail(e);
  if (msemu::Capturing(stream)) return cudaSuccess;  // an event of its own capture: ordered already
  if (msemu::EventComplete(event)) return cudaSuccess;
  msemu::Enqueue(stream, [event] { msemu::WaitEvent(event); });
  return cudaSuccess;
}

// ---- Kernels -----------------------------------------------------------------------

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (func == nullptr) return Fail(cudaErrorInvalidDeviceFunction);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || value > (227 << 10)) return Fail(cudaErrorInvalidValue);
    msemu::SetMaxDynamicShared(func, value);
    return cudaSuccess;
  }
  return cudaSuccess;  // the other attributes are hints
}

}  // extern "C"
