#include "kernels/kernel_table.h"

#include <type_traits>

#include "kernels/cpu/cpu_kernel_table.h"

#ifdef MULTISCREEN_HAVE_CUDA
#include "kernels/cuda/cuda_kernel_table.h"
#endif

namespace multiscreen {

template <typename Real>
absl::StatusOr<std::unique_ptr<kernels::KernelTable<Real>>> MakeKernelTable(Device device,
                                                                            const KernelOptions& options) {
  if (device == Device::kCpu) return std::make_unique<kernels::cpu::CpuKernelTable<Real>>(options);
#ifdef MULTISCREEN_HAVE_CUDA
  if constexpr (std::is_same_v<Real, float>) {
    return kernels::cuda::MakeCudaKernelTable(options);
  } else {
    return absl::InvalidArgumentError("the CUDA kernels compute in fp32 (with bf16/fp16 operands), not fp64");
  }
#else
  return absl::FailedPreconditionError(
      "this build has no CUDA kernels (nvcc was not found at configure time, or MULTISCREEN_CUDA=OFF)");
#endif
}

template absl::StatusOr<std::unique_ptr<kernels::KernelTable<float>>> MakeKernelTable<float>(Device,
                                                                                           const KernelOptions&);
template absl::StatusOr<std::unique_ptr<kernels::KernelTable<double>>> MakeKernelTable<double>(Device,
                                                                                             const KernelOptions&);

}  // namespace multiscreen
