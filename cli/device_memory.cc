#include "cli/device_memory.h"

#include <cstdio>
#include <utility>

#include <mpi.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/flags.h"
#include "parallel/fatal.h"

#ifdef MULTISCREEN_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace multiscreen::cli {
namespace {

// "N bytes (x.xx GiB)".
std::string Bytes(int64_t n) { return absl::StrFormat("%d bytes (%.2f GiB)", n, double(n) / double(int64_t(1) << 30)); }

// OnDeviceOutOfMemory's advice, for CheckDeviceMemory.
std::string& Advice() {
  static std::string advice;
  return advice;
}

bool SeveralRanks() {
  int initialized = 0, finalized = 0, size = 1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return false;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size > 1;
}

}  // namespace

DeviceMemory CurrentDeviceMemory() {
  DeviceMemory m;
#ifdef MULTISCREEN_HAVE_CUDA
  int device = 0;
  if (!CudaAvailable() || cudaGetDevice(&device) != cudaSuccess) return m;
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) == cudaSuccess) m.free = int64_t(free_bytes), m.total = int64_t(total);
  cudaDeviceProp prop{};
  m.name = cudaGetDeviceProperties(&prop, device) == cudaSuccess ? absl::StrCat("cuda:", device, " (", prop.name, ")")
                                                                 : absl::StrCat("cuda:", device);
#endif
  return m;
}

absl::Status CheckDeviceMemory(Device device, int64_t need, const std::string& what) {
  if (device == Device::kCpu) return absl::OkStatus();
  const DeviceMemory m = CurrentDeviceMemory();
  if (m.total == 0 || need <= m.free) return absl::OkStatus();
  std::string line = absl::StrCat(m.name, ": ", what, " need about ", Bytes(need));
  absl::StrAppend(&line, ", only ", Bytes(m.free), " are free of ", Bytes(m.total), "; ", Advice());
  return absl::ResourceExhaustedError(line);
}

void OnDeviceOutOfMemory(std::string command, std::string advice, std::function<void()> cleanup) {
  Advice() = advice;
  SetAllocationFailureHandler([command = std::move(command), advice = std::move(advice),
                               cleanup = std::move(cleanup)](Device device, int64_t bytes, const absl::Status&) {
    const DeviceMemory m = device == Device::kCpu ? DeviceMemory{.name = "cpu"} : CurrentDeviceMemory();
    std::string line = absl::StrCat(m.name, ": out of memory: an array of ", Bytes(bytes), " did not fit beside the ",
                                    Bytes(BufferBytesNow(device)), " this process holds there");
    if (m.total > 0) absl::StrAppend(&line, "; ", Bytes(m.free), " free of ", Bytes(m.total));
    absl::StrAppend(&line, "; ", advice);
    if (SeveralRanks()) FatalError(line);  // names the rank and ends the job
    if (cleanup) cleanup();
    Fail(command.c_str(), absl::ResourceExhaustedError(line));
  });
}

}  // namespace multiscreen::cli
