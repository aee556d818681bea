#include "kernels/decode_cache.h"

#include <type_traits>

#include "kernels/cpu/attention_cache.h"
#include "kernels/cpu/screening_cache.h"
#include "kernels/cuda_kernels_built.h"

#ifdef MULTISCREEN_HAVE_CUDA
#include "kernels/cuda/attention_decode.h"
#include "kernels/cuda/screening_decode.h"
#endif

namespace multiscreen {

template <typename Real>
absl::StatusOr<std::unique_ptr<kernels::ScreeningCache<Real>>> MakeScreeningCache(
    Device device, const kernels::ScreeningShape& shape, const std::vector<kernels::TileScalars>& tiles) {
  if (device == Device::kCpu) {
    return std::unique_ptr<kernels::ScreeningCache<Real>>(new kernels::cpu::CpuScreeningCache<Real>(shape, tiles));
  }
  if (absl::Status built = CudaKernelsBuilt<Real>(); !built.ok()) return built;
#ifdef MULTISCREEN_HAVE_CUDA
  if constexpr (std::is_same_v<Real, float>) return kernels::cuda::MakeCudaScreeningCache(shape, tiles);
#endif
  return absl::InternalError("unreachable: CudaKernelsBuilt accepted a type without CUDA kernels");
}

template <typename Real>
absl::StatusOr<std::unique_ptr<kernels::AttentionCache<Real>>> MakeAttentionCache(
    Device device, const kernels::AttentionCacheShape& shape) {
  if (device == Device::kCpu) {
    return std::unique_ptr<kernels::AttentionCache<Real>>(new kernels::cpu::CpuAttentionCache<Real>(shape));
  }
  if (absl::Status built = CudaKernelsBuilt<Real>(); !built.ok()) return built;
#ifdef MULTISCREEN_HAVE_CUDA
  if constexpr (std::is_same_v<Real, float>) return kernels::cuda::MakeCudaAttentionCache(shape);
#endif
  return absl::InternalError("unreachable: CudaKernelsBuilt accepted a type without CUDA kernels");
}

template absl::StatusOr<std::unique_ptr<kernels::ScreeningCache<float>>> MakeScreeningCache<float>(
    Device, const kernels::ScreeningShape&, const std::vector<kernels::TileScalars>&);
template absl::StatusOr<std::unique_ptr<kernels::ScreeningCache<double>>> MakeScreeningCache<double>(
    Device, const kernels::ScreeningShape&, const std::vector<kernels::TileScalars>&);
template absl::StatusOr<std::unique_ptr<kernels::AttentionCache<float>>> MakeAttentionCache<float>(
    Device, const kernels::AttentionCacheShape&);
template absl::StatusOr<std::unique_ptr<kernels::AttentionCache<double>>> MakeAttentionCache<double>(
    Device, const kernels::AttentionCacheShape&);

}  // namespace multiscreen
