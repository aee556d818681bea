// A typed, growable array on one device: the memory the model keeps between steps
// (activations, packed weights, gradients of Ē) and the trainer's state (parameters,
// gradients, AdamW's moments), on the device of its kernel table.
// Grow-only, so that after the first step of a shape no call allocates (the per-device
// arena of the model: every array lives as long as its model, sized once).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "kernels/buffer.h"

namespace multiscreen {

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(Device device = Device::kCpu) : device_(device) {}
  DeviceArray(DeviceArray&&) noexcept = default;
  DeviceArray& operator=(DeviceArray&&) noexcept = default;

  Device device() const { return device_; }
  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* data() { return capacity_ > 0 ? buffer_.template as<T>() : nullptr; }
  const T* data() const { return capacity_ > 0 ? static_cast<const T*>(buffer_.data()) : nullptr; }

  // size() becomes n. Growing past the capacity reallocates and keeps the first size()
  // elements; elements never used before are zero, ones reused within the capacity
  // keep what they last held (fill them where it matters). Allocation failure is fatal
  // (AllocationFailed: the command's line, or one naming the size and device), as for std::vector.
  void Resize(int64_t n) {
    if (n > capacity_) {
      absl::StatusOr<Buffer> grown = Buffer::Allocate(device_, static_cast<size_t>(n) * sizeof(T));
      if (!grown.ok()) {
        AllocationFailed(device_, n * int64_t(sizeof(T)), grown.status(),
                         DeviceName(device_) + " array of " + std::to_string(n) + " elements: " +
                             std::string(grown.status().message()));
      }
      if (size_ > 0) {
        absl::Status copied = grown->CopyFrom(buffer_);
        if (!copied.ok()) {
          std::fprintf(stderr, "multiscreen: fatal: growing a %s array: %s\n", DeviceName(device_).c_str(),
                       std::string(copied.message()).c_str());
          std::exit(1);
        }
      }
      buffer_ = std::move(*grown);
      capacity_ = n;
    }
    size_ = n;
  }

  // The named host⇄device points (parameters in at start/resume, out to a checkpoint):
  // size() elements from / into host memory, complete on return. Failure is fatal (one
  // line), as for Resize.
  void CopyFromHost(const T* host) {
    if (size_ > 0) Check("upload", buffer_.Upload(host, Bytes()));
  }
  void CopyToHost(T* host) const {
    if (size_ > 0) Check("download", buffer_.Download(host, Bytes()));
  }
  // A host copy of the whole array.
  std::vector<T> ToHost() const {
    std::vector<T> out(size_);
    CopyToHost(out.data());
    return out;
  }

 private:
  size_t Bytes() const { return static_cast<size_t>(size_) * sizeof(T); }
  void Check(const char* what, const absl::Status& status) const {
    if (status.ok()) return;
    std::fprintf(stderr, "multiscreen: fatal: %s array %s: %s\n", DeviceName(device_).c_str(), what,
                 std::string(status.message()).c_str());
    std::exit(1);
  }

  Device device_;
  Buffer buffer_;
  int64_t size_ = 0, capacity_ = 0;
};

// Host memory standing for a DeviceArray at a named host⇄device point (a checkpoint
// read or written, parameters initialized): on the CPU the array's own memory, on a
// device a host copy — downloaded at construction when `read`, uploaded by Commit.
// The array must not be resized while the mirror lives.
template <typename T>
class HostMirror {
 public:
  HostMirror(DeviceArray<T>& array, bool read) : array_(array) {
    if (array.device() == Device::kCpu) return;
    copy_.resize(array.size());
    if (read) array.CopyToHost(copy_.data());
  }
  T* data() { return array_.device() == Device::kCpu ? array_.data() : copy_.data(); }
  // The host values into the array (nothing to do on the CPU).
  void Commit() {
    if (array_.device() != Device::kCpu) array_.CopyFromHost(copy_.data());
  }

 private:
  DeviceArray<T>& array_;
  std::vector<T> copy_;
};

}  // namespace multiscreen
