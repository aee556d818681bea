// Device-tagged memory: a Buffer knows whether its bytes live in host memory or
// on a CUDA device, so later code can run either way and refuse a mix-up.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"

namespace multiscreen {

enum class Device { kCpu, kCuda };

std::string DeviceName(Device device);

// The most bytes Buffers (and so DeviceArrays) held at once on `device` in this
// process: a model's device memory, for bench's report.
int64_t BufferBytesPeak(Device device);

// What a command says when a DeviceArray cannot get memory on a device (`bytes`: the
// array's new size; `status`: the allocator's error): called once, from the thread that
// allocated, before the process exits 1. A command installs it to name the flags that shrink its memory
// and to remove outputs it has begun (cli/device_memory.h); without one the line is
// "multiscreen: fatal: <device> array of N elements: <error>".
using AllocationFailureHandler = std::function<void(Device device, int64_t bytes, const absl::Status& status)>;
void SetAllocationFailureHandler(AllocationFailureHandler handler);

// The failure path of DeviceArray's allocations: the installed handler (else `generic`
// on one line), then exit(1). Never returns.
[[noreturn]] void AllocationFailed(Device device, int64_t bytes, const absl::Status& status, const std::string& generic);

// Bytes Buffers hold on `device` now in this process.
int64_t BufferBytesNow(Device device);

// True when this build has the CUDA kernels and a CUDA device is visible.
bool CudaAvailable();

// CUDA devices this process sees (0 without CUDA in the build or without a device).
int CudaDeviceCount();

// Owns `bytes` bytes on `device` (zero-initialized). Move-only.
class Buffer {
 public:
  // Errors: a CUDA buffer in a build without CUDA or without a device, or an
  // allocation failure (with the size).
  static absl::StatusOr<Buffer> Allocate(Device device, size_t bytes);
  Buffer() = default;
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  Device device() const { return device_; }
  size_t bytes() const { return bytes_; }
  void* data() { return data_; }
  const void* data() const { return data_; }
  template <typename T>
  T* as() { return static_cast<T*>(data_); }

  // Copies min(bytes) from `src` into this buffer, across devices as needed.
  absl::Status CopyFrom(const Buffer& src);
  // Copies `bytes` from host memory into this buffer / from it into host memory.
  absl::Status Upload(const void* host, size_t bytes);
  absl::Status Download(void* host, size_t bytes) const;

 private:
  void Release();
  Device device_ = Device::kCpu;
  size_t bytes_ = 0;
  void* data_ = nullptr;
};

}  // namespace multiscreen
