#include "kernels/transformer_kernels.h"

#include <type_traits>

#include "kernels/cpu/cpu_transformer_kernels.h"
#include "kernels/cuda_kernels_built.h"

#ifdef MULTISCREEN_HAVE_CUDA
#include "kernels/cuda/cuda_transformer_kernels.h"
#endif

namespace multiscreen {

template <typename Real>
absl::StatusOr<std::unique_ptr<kernels::TransformerKernels<Real>>> MakeTransformerKernels(
    Device device, const KernelOptions& options) {
  if (device == Device::kCpu) {
    return std::unique_ptr<kernels::TransformerKernels<Real>>(new kernels::cpu::CpuTransformerKernels<Real>());
  }
  if (absl::Status built = CudaKernelsBuilt<Real>(); !built.ok()) return built;
#ifdef MULTISCREEN_HAVE_CUDA
  if constexpr (std::is_same_v<Real, float>) return kernels::cuda::MakeCudaTransformerKernels(options);
#endif
  return absl::InternalError("unreachable: CudaKernelsBuilt accepted a type without CUDA kernels");
}

template absl::StatusOr<std::unique_ptr<kernels::TransformerKernels<float>>> MakeTransformerKernels<float>(
    Device, const KernelOptions&);
template absl::StatusOr<std::unique_ptr<kernels::TransformerKernels<double>>> MakeTransformerKernels<double>(
    Device, const KernelOptions&);

}  // namespace multiscreen
