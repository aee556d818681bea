#include "kernels/buffer.h"

#include <atomic>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"

#ifdef MULTISCREEN_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace multiscreen {

namespace {

// Bytes held by Buffers per device now, and the most ever held (BufferBytesPeak).
struct Usage {
  std::atomic<int64_t> now{0}, peak{0};
};
Usage& UsageOf(Device device) {
  static Usage usage[2];
  return usage[device == Device::kCpu ? 0 : 1];
}
void Count(Device device, int64_t bytes) {
  Usage& u = UsageOf(device);
  const int64_t now = u.now.fetch_add(bytes) + bytes;
  int64_t peak = u.peak.load();
  while (now > peak && !u.peak.compare_exchange_weak(peak, now)) {
  }
}

}  // namespace

int64_t BufferBytesPeak(Device device) { return UsageOf(device).peak.load(); }

int64_t BufferBytesNow(Device device) { return UsageOf(device).now.load(); }

namespace {
std::mutex& HandlerMutex() {
  static std::mutex m;
  return m;
}
AllocationFailureHandler& Handler() {
  static AllocationFailureHandler handler;
  return handler;
}
}  // namespace

void SetAllocationFailureHandler(AllocationFailureHandler handler) {
  std::lock_guard<std::mutex> lock(HandlerMutex());
  Handler() = std::move(handler);
}

[[noreturn]] void AllocationFailed(Device device, int64_t bytes, const absl::Status& status, const std::string& generic) {
  AllocationFailureHandler handler;
  {
    std::lock_guard<std::mutex> lock(HandlerMutex());
    handler = Handler();
  }
  if (handler) {
    handler(device, bytes, status);
  } else {
    std::fprintf(stderr, "multiscreen: fatal: %s\n", generic.c_str());
  }
  std::fflush(stderr);
  std::exit(1);
}

std::string DeviceName(Device device) { return device == Device::kCpu ? "cpu" : "cuda"; }

bool CudaAvailable() { return CudaDeviceCount() > 0; }

int CudaDeviceCount() {
#ifdef MULTISCREEN_HAVE_CUDA
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
#else
  return 0;
#endif
}

absl::StatusOr<Buffer> Buffer::Allocate(Device device, size_t bytes) {
  Buffer b;
  b.device_ = device;
  b.bytes_ = bytes;
  if (bytes == 0) return b;
  if (device == Device::kCpu) {
    b.data_ = std::calloc(bytes, 1);
    if (b.data_ == nullptr) return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " host bytes"));
    Count(device, int64_t(bytes));
    return b;
  }
#ifdef MULTISCREEN_HAVE_CUDA
  if (!CudaAvailable()) return absl::FailedPreconditionError("no CUDA device is visible");
  if (cudaError_t e = cudaMalloc(&b.data_, bytes); e != cudaSuccess) {
    b.data_ = nullptr;
    return absl::ResourceExhaustedError(absl::StrCat("cudaMalloc(", bytes, "): ", cudaGetErrorString(e)));
  }
  cudaMemset(b.data_, 0, bytes);
  Count(device, int64_t(bytes));
  return b;
#else
  return absl::FailedPreconditionError("this build has no CUDA support (configure with MULTISCREEN_CUDA=ON)");
#endif
}

Buffer::Buffer(Buffer&& other) noexcept
    : device_(other.device_), bytes_(std::exchange(other.bytes_, 0)), data_(std::exchange(other.data_, nullptr)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Release();
    device_ = other.device_;
    bytes_ = std::exchange(other.bytes_, 0);
    data_ = std::exchange(other.data_, nullptr);
  }
  return *this;
}

Buffer::~Buffer() { Release(); }

void Buffer::Release() {
  if (data_ == nullptr) return;
  Count(device_, -int64_t(bytes_));
  if (device_ == Device::kCpu) {
    std::free(data_);
  } else {
#ifdef MULTISCREEN_HAVE_CUDA
    cudaFree(data_);
#endif
  }
  data_ = nullptr;
}

namespace {

absl::Status Copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (dst_device == Device::kCpu && src_device == Device::kCpu) {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
#ifdef MULTISCREEN_HAVE_CUDA
  const cudaMemcpyKind kind = dst_device == Device::kCpu   ? cudaMemcpyDeviceToHost
                              : src_device == Device::kCpu ? cudaMemcpyHostToDevice
                                                           : cudaMemcpyDeviceToDevice;
  if (cudaError_t e = cudaMemcpy(dst, src, bytes, kind); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("cudaMemcpy: ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
#else
  return absl::FailedPreconditionError("this build has no CUDA support");
#endif
}

}  // namespace

absl::Status Buffer::CopyFrom(const Buffer& src) {
  return Copy(data_, device_, src.data_, src.device_, std::min(bytes_, src.bytes_));
}

absl::Status Buffer::Upload(const void* host, size_t bytes) {
  if (bytes > bytes_) return absl::OutOfRangeError(absl::StrCat("upload of ", bytes, " bytes into ", bytes_));
  return Copy(data_, device_, host, Device::kCpu, bytes);
}

absl::Status Buffer::Download(void* host, size_t bytes) const {
  if (bytes > bytes_) return absl::OutOfRangeError(absl::StrCat("download of ", bytes, " bytes from ", bytes_));
  return Copy(host, Device::kCpu, data_, device_, bytes);
}

}  // namespace multiscreen
