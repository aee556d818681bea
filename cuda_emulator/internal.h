// The state that the scheduler (scheduler.cc) and the checkers (checks.cc) share: the
// running block and thread of each host thread, and the shadow of shared memory.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda_emulator/emulator.h"

namespace msemu {

// printf into a std::string.
std::string Format(const char* format, ...) __attribute__((format(printf, 1, 2)));
// What address p is, for a report: "offset 8 of a 64-byte allocation at 0x..", "4 bytes
// past the end of ..", or "0x.., which is not device memory".
std::string DescribeAddress(uintptr_t p);
// Bumped by every cudaFree, so that cached allocation look-ups know to look again.
extern std::atomic<uint64_t> g_heap_generation;

// What the race checker knows of one byte of shared memory within the running block:
// its last plain write, its atomics and its plain reads, each with the barrier interval
// (epoch, from 1; 0: none) it fell in and, for ordering within a warp, the warp's
// rendezvous count (warp epoch) at the time.
struct Shadow {
  bool initialized = false;                   // written (plainly or atomically) by this block
  uint32_t write_epoch = 0, atomic_epoch = 0, read_epoch = 0;
  int32_t writer = -1, atomic_thread = -1, reader = -1;  // linear thread index (the first, for atomics and reads)
  uint32_t writer_warp_epoch = 0;
  bool many_atomics = false, many_readers = false;  // more than one thread in that epoch
  int32_t reader_warp = -1;                   // the warp of every reader in read_epoch, or -2 for several warps
  uint32_t reader_warp_epoch = 0;             // the latest warp epoch at which one of them read
};

// One emulated thread (a fiber) of the running block.
struct ThreadState {
  uintptr_t stack_lo = 0, stack_hi = 0;
  uint3 idx{};
  int linear = 0, warp = 0, lane = 0;
};

// The running block of a launch.
struct BlockState {
  const char* kernel = "";
  uint3 idx{};
  dim3 dim, grid;
  uint32_t epoch = 1;                    // barrier intervals passed, from 1
  std::vector<uint32_t> warp_epoch;      // warp-collective rendezvous passed, per warp
  std::unordered_map<uintptr_t, Shadow> shared;  // by address
  char* dynamic_shared = nullptr;
  size_t dynamic_bytes = 0;
};

// What one call (a kernel launch, a cuBLAS product, a copy or memset) counts while it
// runs on this host thread: global-memory sectors under its stamp (0: counting off) and
// tensor-core instructions.
struct CallCounts {
  uint32_t stamp = 0;
  uint64_t bytes_read = 0, bytes_written = 0;
  uint64_t mma = 0, ldmatrix = 0, cp_async = 0;
};
// The running call's counts (null outside one).
extern thread_local CallCounts* t_counts;
// How many cudaGraphLaunch replays this host thread is inside (graph.cc): the work AddWork
// tallies meanwhile ran as graph nodes (WorkTally::graph_nodes).
extern thread_local int t_graph_replays;
// A fresh stamp for a call's sector marks when counting is on, else 0 (work_tally.cc).
uint32_t NextCountStamp();
// Counts the sectors of [offset, offset + bytes) of `al` not yet marked read (write) by
// the call of counts->stamp into its bytes_read (bytes_written), and marks them
// (memory.cc). A no-op when counts is null, its stamp 0, or the allocation unmarked.
void CountSectors(Allocation* al, size_t offset, size_t bytes, bool write, CallCounts* counts);
// The same for [p, p + bytes), found among the live allocations (cuBLAS operands,
// copies, memsets); bytes outside device memory are not counted.
void CountSectors(const void* p, size_t bytes, bool write, CallCounts* counts);
// Gives every live allocation its sector marks (SetCounting(true); memory.cc).
void EnableSectorMarks();

// The emulated thread running on this host thread (null outside kernel code), its
// block, and whether its loads and stores are checked now.
extern thread_local ThreadState* t_thread;
extern thread_local BlockState* t_block;
extern thread_local bool t_checking;

// "kernel K block (x,y,z) thread (x,y,z)" of the running thread.
std::string WhereNow();
// A warp collective computed by `combine` (tensor_core.cc) once every lane of `mask`
// has arrived: each lane posts `data` (its operands, and room for its results); combine
// gets the warp's 32 lanes' data (null for a lane outside the mask) and fills in each
// lane's results. `name` ("mma.sync...") names it in reports; lanes that call another
// name, or another collective, are a report as for __shfl_sync.
using WarpCombine = void (*)(void* const lanes[32]);
void CombineInWarp(const char* name, WarpCombine combine, unsigned mask, void* data);
// Ends the running emulated thread at once and fails its launch with `error` (what a
// GPU does on an illegal address: the context keeps the error).
[[noreturn]] void KillThread(cudaError_t error);
// Sets the process's sticky error (every later runtime call returns it).
void SetStickyError(cudaError_t error);
cudaError_t StickyError();
void ClearStickyError();
// Frees every live allocation of the current device (cudaDeviceReset).
void FreeAllAllocations();
// The address range of the calling host thread's static TLS (where static __shared__
// variables live).
void StaticTlsRange(uintptr_t* lo, uintptr_t* hi);
// A shared-memory access of the running thread (checks.cc): race and initialization.
void CheckShared(uintptr_t address, size_t bytes, bool write, bool atomic);
// A global (device) memory access of the running thread (checks.cc).
void CheckGlobal(uintptr_t address, size_t bytes, bool write);
// An atomic read-modify-write of the running thread (checks.cc).
void CheckAtomic(uintptr_t address, size_t bytes);
// Streams: wait for every stream's queued work (cudaDeviceSynchronize).
void WaitAllStreams();
// The error cudaGetLastError returns next (runtime.cc).
void SetLastError(cudaError_t error);
// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes).
void SetMaxDynamicShared(const void* kernel, int bytes);

// ---- Stream capture (graph.cc) ----------------------------------------------------------

// One captured operation: `replay` runs it on the stream the graph is launched into;
// `params` (may be null) its copied parameters, kept alive with it; `pointers` the device
// allocations it was captured with (checked at each replay).
struct GraphNode {
  // What cudaGraphExecUpdate compares (graph.cc): the node's type, and for a copy its
  // direction (the source and destination memory types may not change).
  enum class Type : uint8_t { kKernel, kMemcpy, kMemset, kHost, kOther };
  struct Pointer {
    size_t offset = 0;  // of the word in params, or ~i for the i-th explicit pointer
    const void* value = nullptr;
    uintptr_t base = 0;
    uint64_t serial = 0;
  };
  std::string what;
  Type type = Type::kOther;
  int copy_kind = 0;  // kMemcpy: its cudaMemcpyKind
  std::function<void(cudaStream_t)> replay;
  std::shared_ptr<const void> params;
  std::vector<Pointer> pointers;
};
// While `stream` is being captured: records `replay` as its next node, named `what`, of
// `type` (and `copy_kind`, a copy's cudaMemcpyKind), with the device pointers among `params`
// (params_bytes; every aligned 8-byte word that points into a live allocation) and
// `pointers`; returns true. Otherwise false (run it now).
bool RecordNode(cudaStream_t stream, std::string what, std::function<void(cudaStream_t)> replay,
                std::shared_ptr<const void> params, size_t params_bytes, const std::vector<const void*>& pointers,
                GraphNode::Type type, int copy_kind = 0);
// True while `stream` (any, for AnyCapture) is being captured.
bool Capturing(cudaStream_t stream);
bool AnyCapture();
// A call that breaks a rule of capture: invalidates the capture on `stream` (nullptr: every
// one under way) and returns `error`; cudaSuccess when no such capture is under way.
cudaError_t CaptureForbids(cudaStream_t stream, cudaError_t error);
// cudaEventRecord of `event` into the capture on `stream`.
void NoteCapturedEvent(cudaStream_t stream, const void* event);
// A use of `event` by cudaStreamWaitEvent on `waiting` (or, with nullptr, by the host:
// query, synchronize): the capture rule it breaks, or cudaSuccess. The host on an event
// recorded in a capture: cudaErrorCapturedEvent (the capture goes on); a capturing stream
// waiting on an event of another capture: cudaErrorStreamCaptureMerge, on one from outside
// any: cudaErrorStreamCaptureIsolation (both invalidate the waiting capture).
cudaError_t CapturedEventUse(const void* event, cudaStream_t waiting);
// `event` recorded again outside any capture: no longer a captured event.
void ForgetCapturedEvent(const void* event);
// Work issued to the legacy stream while a blocking stream (one not created
// cudaStreamNonBlocking) is being captured would make the legacy stream depend on the
// capture: cudaErrorStreamCaptureImplicit, invalidating those captures; else cudaSuccess.
cudaError_t LegacyWorkDuringCapture(cudaStream_t stream);

}  // namespace msemu
