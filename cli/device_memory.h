// Too little memory on a GPU for `generate`, `eval` and `train` (--device=cuda): one
// line naming the device, the bytes needed and free there, and the flags that shrink
// what the command holds, with exit status 1 and no partial outputs. Up front where the
// command can estimate its need (CheckDeviceMemory), and for any allocation that fails
// later (OnDeviceOutOfMemory), instead of the allocator's "cudaMalloc(N): out of memory".
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "kernels/buffer.h"

namespace multiscreen::cli {

// Free and total bytes of the current CUDA device (cudaMemGetInfo) and its name,
// "cuda:N (name)"; zeros and "cuda" when unknown (no CUDA in the build, no device).
struct DeviceMemory {
  int64_t free = 0, total = 0;
  std::string name = "cuda";
};
DeviceMemory CurrentDeviceMemory();

// From now on a device allocation that fails (kernels/buffer.h's AllocationFailed) prints
// "multiscreen <command>: <device>: out of memory: an array of N bytes (x GiB) did not fit
// beside the H bytes (y GiB) this process holds there; M bytes free of T; <advice>",
// runs `cleanup` (which removes the outputs the command began; may be empty) and exits 1.
// Under MPI with several ranks the line goes through FatalError (its rank, and the job
// ends: the other ranks would wait for this one). Install it before the command's first
// device allocation (a kernel table's GEMM workspace is one).
void OnDeviceOutOfMemory(std::string command, std::string advice, std::function<void()> cleanup = {});

// OK on the CPU, when `need` bytes fit in the current device's free memory, or when
// that is unknown; else ResourceExhausted: "<device>: <what> need about N bytes (x GiB),
// only M bytes (y GiB) are free of T (z GiB); <advice>", the advice OnDeviceOutOfMemory
// installed.
absl::Status CheckDeviceMemory(Device device, int64_t need, const std::string& what);

}  // namespace multiscreen::cli
