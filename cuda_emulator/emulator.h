// The emulated CUDA device's internals shared by its parts (runtime.cc, memory.cc,
// scheduler.cc, checks.cc, cublas.cc, nccl.cc): device memory and what is known of
// each byte, the checkers' reports, the streams' queues, and the devices a process
// sees. Test infrastructure: the emulated build (MULTISCREEN_CUDA=EMULATED) links this
// folder in place of cudart, cuBLAS, cuBLASLt and NCCL; the kernels know nothing of it
// beyond kernels/cuda/launch.h. Not for the product's nvcc build.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace msemu {

// ---- Devices ---------------------------------------------------------------------

// Devices this process sees: MULTISCREEN_EMULATED_GPUS (default 1, at most 64) on the
// node, filtered and renumbered by CUDA_VISIBLE_DEVICES (indices, as CUDA reads them).
int VisibleDeviceCount();
// The current device of the calling host thread (cudaSetDevice), an index into the
// visible devices.
int CurrentDevice();
void SetCurrentDevice(int device);
// The node-wide index of visible device `device` (what CUDA_VISIBLE_DEVICES named).
int NodeDeviceIndex(int device);
// "0000:NN:00.0": a distinct PCI bus id per node-wide device index, as a node's GPUs have.
std::string PciBusId(int device);

// ---- Device memory ------------------------------------------------------------------

// One cudaMalloc: [base, base + bytes) on `device`; every byte starts uninitialized
// (and holds signalling-NaN bytes), a write (kernel store, memcpy, memset, library
// output) initializes it.
struct Allocation {
  uintptr_t base = 0;
  size_t bytes = 0;
  int device = 0;
  uint64_t serial = 0;  // the allocation's number, from 1: one made again at the same base differs
  std::vector<uint8_t> initialized;  // one flag per byte
  // While counting (SetCounting): per 32-byte sector, (stamp << 2) | 1 if read | 2 if
  // written under that stamp (one stamp per counted call); empty otherwise.
  std::vector<uint32_t> sectors;
};

// Allocates `bytes` of device memory on the current device (guard zones either side,
// counted against the device's capacity: MULTISCREEN_EMULATED_GPU_MEMORY bytes,
// default 80 GiB or the host's available memory if less); nullptr when it would not fit.
void* DeviceAllocate(size_t bytes);
// Frees what DeviceAllocate returned; false when p is not the start of a live allocation.
bool DeviceFree(void* p);
// Bytes allocated and capacity of the current device.
void DeviceMemoryInfo(size_t* free_bytes, size_t* total_bytes);

// The live allocation that holds address p, or nullptr. The pointer stays valid until
// that allocation is freed.
Allocation* FindAllocation(const void* p);
// Empty when [p, p + bytes) lies inside one live allocation; otherwise one phrase
// saying why not, e.g. "0x7f.. is host memory, not device memory" or "8 bytes past the
// end of a 1024-byte allocation at 0x7f..".
std::string DescribeBadDeviceRange(const void* p, size_t bytes);
// Marks [p, p + bytes) (inside device memory) as written.
void MarkInitialized(const void* p, size_t bytes);
// Offset of the first byte of [p, p + bytes) never written, or -1 (also -1 where the
// range is not device memory).
int64_t FirstUninitialized(const void* p, size_t bytes);
// Copies the initialized-flags of [src, src + bytes) onto [dst, dst + bytes) (device to
// device copies carry what is known).
void CopyInitialized(void* dst, const void* src, size_t bytes);

// ---- Reports ------------------------------------------------------------------------

// A finding of the checkers (race, out of bounds, uninitialized read, barrier, API
// misuse): one line, starting "cuda emulator: ". Printed to stderr and the process
// exits with status 86, unless a ScopedCapture is active, which collects it instead.
void Report(const std::string& line);

// While alive, reports are collected (for the tests that plant a bug and check that
// its report appears) instead of ending the process.
class ScopedCapture {
 public:
  ScopedCapture();
  ~ScopedCapture();
  ScopedCapture(const ScopedCapture&) = delete;
  ScopedCapture& operator=(const ScopedCapture&) = delete;
  const std::vector<std::string>& reports() const;
};

// ---- Work accounting ------------------------------------------------------------------

// What the device ran under one name since the process started (one entry per name):
// kernel launches (the kernel's name, as in reports), cuBLAS/cuBLASLt products (the
// function and the product's shape, e.g. "cublasLtMatmul 640x256x16 op(A)=T op(B)=N
// bf16,bf16->f32 beta=0"), copies ("cudaMemcpy", "cudaMemcpyAsync", every direction),
// memsets ("cudaMemset", "cudaMemsetAsync") and host synchronizations
// ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"; a blocking
// cudaMemcpy to the host counts one in its own entry) and graph launches ("cudaGraphLaunch",
// kind kGraph; the nodes a launch runs count under their own names as well, and in their
// graph_nodes). A call the emulator refuses (a bad
// launch configuration, an invalid argument) is not counted. Tests read it before and
// after a call to count what the call launched (tests/cuda/decoder_cuda_test.cc), and
// `bench train --count` prints it for one training step (docs/emulated_device.md,
// "Counting what the code does").
enum class WorkKind : uint8_t { kKernel, kLibrary, kCopy, kMemset, kSync, kGraph };
struct WorkTally {
  WorkKind kind = WorkKind::kKernel;
  uint64_t calls = 0;
  uint64_t threads = 0;          // kernels: grid × block, summed over launches
  uint64_t bytes = 0;            // copies and memsets: bytes moved or set
  uint64_t bytes_to_host = 0;    // copies: of those, device → host
  uint64_t bytes_to_device = 0;  // copies: of those, host → device
  uint64_t syncs = 0;            // host synchronizations (the host waits for the device)
  uint64_t gemm_mnk = 0;         // cuBLAS(Lt): m·n·k of each product, summed (2·m·n·k FLOPs)
  uint64_t mma = 0;              // mma.sync m16n8k16 warp instructions
  uint64_t ldmatrix = 0;         // ldmatrix .x4 warp instructions
  uint64_t cp_async = 0;         // cp.async 16-byte copies (one per thread that issues it)
  uint64_t graph_nodes = 0;      // of the calls, those a cudaGraphLaunch ran as nodes of its graph
  // Only while counting is on (SetCounting): global memory touched, in 32-byte sectors
  // (aligned to the allocation's start) counted once per call and direction: a sector a
  // call reads (writes) any byte of adds 32 bytes read (written), however often it is
  // touched within the call. Kernels, cuBLAS operands (each column's rows), device-to-device
  // copies, memsets.
  uint64_t bytes_read = 0, bytes_written = 0;
};
// A snapshot, by name (every thread's work; safe to call while others launch).
std::map<std::string, WorkTally> WorkTallies();
// Adds `work` (its calls too) to the entry `name`, whose kind becomes work.kind (the
// emulator's parts call it).
void AddWork(const std::string& name, const WorkTally& work);
// Entry-wise `after` minus `before` (the work between two snapshots); entries with no
// calls in between are left out.
std::map<std::string, WorkTally> WorkBetween(const std::map<std::string, WorkTally>& before,
                                             const std::map<std::string, WorkTally>& after);

// Counting of global-memory sectors (bytes_read, bytes_written): off by default, since it
// costs every global load and store a look-up and device memory an eighth more host
// memory; on from the start with MULTISCREEN_EMULATOR_COUNT=1, or by SetCounting(true).
// Counting assumes that one host thread launches at a time (sector marks are per
// allocation).
void SetCounting(bool on);
bool Counting();

// ---- Streams ------------------------------------------------------------------------

// Work that runs on a stream's worker thread after everything queued on that stream
// before it (the NCCL collectives, cudaLaunchHostFunc). Kernels, copies and memsets run
// at once on the calling thread, after the stream's queued work is done.
void Enqueue(cudaStream_t stream, std::function<void()> work);
// Blocks until the stream's queued work is done (for the legacy stream: every
// blocking stream's).
void WaitStream(cudaStream_t stream);
// True when nothing queued on the stream is still running or waiting.
bool StreamIdle(cudaStream_t stream);

}  // namespace msemu
