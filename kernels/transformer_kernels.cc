#include "kernels/transformer_kernels.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_transformer_kernels.h"

namespace multiscreen {

template <typename Real>
absl::StatusOr<std::unique_ptr<kernels::TransformerKernels<Real>>> MakeTransformerKernels(Device device) {
  if (device != Device::kCpu) {
    return absl::UnimplementedError(
        absl::StrCat("--device=", DeviceName(device), ": no CUDA kernels for the Transformer yet (use --device=cpu)"));
  }
  return std::unique_ptr<kernels::TransformerKernels<Real>>(new kernels::cpu::CpuTransformerKernels<Real>());
}

template absl::StatusOr<std::unique_ptr<kernels::TransformerKernels<float>>> MakeTransformerKernels<float>(Device);
template absl::StatusOr<std::unique_ptr<kernels::TransformerKernels<double>>> MakeTransformerKernels<double>(Device);

}  // namespace multiscreen
