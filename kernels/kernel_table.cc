#include "kernels/kernel_table.h"

#include <type_traits>

#include "kernels/cpu/cpu_kernel_table.h"
#include "kernels/cuda_kernels_built.h"

#ifdef MULTISCREEN_HAVE_CUDA
#include "kernels/cuda/cuda_kernel_table.h"
#endif

namespace multiscreen {

template <typename Real>
absl::Status CudaKernelsBuilt() {
#ifdef MULTISCREEN_HAVE_CUDA
  if constexpr (std::is_same_v<Real, float>) {
    return absl::OkStatus();
  } else {
    return absl::InvalidArgumentError("the CUDA kernels compute in fp32 (with bf16/fp16 operands), not fp64");
  }
#else
  return absl::FailedPreconditionError(
      "this build has no CUDA kernels (nvcc was not found at configure time, or MULTISCREEN_CUDA=OFF)");
#endif
}

template <typename Real>
absl::StatusOr<std::unique_ptr<kernels::KernelTable<Real>>> MakeKernelTable(Device device,
                                                                            const KernelOptions& options) {
  if (device == Device::kCpu) return std::make_unique<kernels::cpu::CpuKernelTable<Real>>(options);
  if (absl::Status built = CudaKernelsBuilt<Real>(); !built.ok()) return built;
#ifdef MULTISCREEN_HAVE_CUDA
  if constexpr (std::is_same_v<Real, float>) return kernels::cuda::MakeCudaKernelTable(options);
#endif
  return absl::InternalError("unreachable: CudaKernelsBuilt accepted a type without CUDA kernels");
}

template absl::Status CudaKernelsBuilt<float>();
template absl::Status CudaKernelsBuilt<double>();
template absl::StatusOr<std::unique_ptr<kernels::KernelTable<float>>> MakeKernelTable<float>(Device,
                                                                                           const KernelOptions&);
template absl::StatusOr<std::unique_ptr<kernels::KernelTable<double>>> MakeKernelTable<double>(Device,
                                                                                             const KernelOptions&);

}  // namespace multiscreen
