// The named host⇄device points of a computation whose caller keeps parameters and
// gradients in host memory — `forward`'s output and the streamed forward
// (cli/forward_command.cc, model/streamed_forward.cc): parameters in once, gradients out
// once. (The training step keeps its state on the device instead: trainer/trainer.h.)
// On the CPU nothing is copied — the host pointers themselves are handed to the model; on a
// device, copies of the given sizes live here.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/device_array.h"
#include "kernels/kernel_table.h"

namespace multiscreen {

template <typename Real>
class HostStaging {
 public:
  // Errors: MakeKernelTable's for `device`.
  static absl::StatusOr<HostStaging> Create(Device device) {
    HostStaging s(device);
    if (device != Device::kCpu) {
      auto ops = MakeKernelTable<Real>(device);
      if (!ops.ok()) return ops.status();
      s.ops_ = std::move(*ops);
    }
    return s;
  }

  // params [n] as the model's device sees them (uploaded unless on the CPU).
  const Real* In(const Real* host, int64_t n) {
    if (ops_ == nullptr) return host;
    params_.Resize(n);
    ops_->Upload(host, n, params_.data());
    return params_.data();
  }
  // Where the model adds gradients [n] that AddOut then adds into host: host itself on
  // the CPU, else a zeroed device buffer.
  Real* GradientsFor(Real* host, int64_t n) {
    if (ops_ == nullptr) return host;
    grads_.Resize(n);
    ops_->Fill(grads_.data(), n, Real(0));
    return grads_.data();
  }
  // host[i] += the device gradients (after the model's last op; nothing on the CPU).
  void AddOut(Real* host) {
    if (ops_ == nullptr) return;
    const int64_t n = grads_.size();
    downloaded_.resize(n);
    ops_->Download(grads_.data(), n, downloaded_.data());
    for (int64_t i = 0; i < n; ++i) host[i] += downloaded_[i];
  }

 private:
  explicit HostStaging(Device device) : params_(device), grads_(device) {}
  std::unique_ptr<kernels::KernelTable<Real>> ops_;  // null on the CPU
  DeviceArray<Real> params_, grads_;
  std::vector<Real> downloaded_;
};

}  // namespace multiscreen
