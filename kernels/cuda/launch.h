// Launch shapes shared by the simple CUDA kernels of kernels/cuda: a block of
// kThreads threads, and a grid for n independent elements walked with a grid-stride
// loop (capped so that the grid never exceeds what every device accepts). And Launch,
// the one place a kernel is launched: <<<>>> under nvcc, the emulated device's launch
// (cuda_emulator/device.h) in the emulated build.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <utility>

namespace multiscreen::kernels::cuda {

inline constexpr int kThreads = 256;

// Blocks for n elements at kThreads per block, at least 1 and at most 65535·16.
inline unsigned BlocksFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, int64_t(65535) * 16));
}

// Kernel<<<grid, block, shared_bytes, stream>>>(args...): `Kernel` is a __global__
// function (a template's instance named in full), `shared_bytes` its dynamic shared
// memory. A bad configuration shows in cudaGetLastError (MS_CUDA_CHECK_LAUNCH).
template <auto Kernel, typename... Args>
void Launch(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, Args&&... args) {
#ifdef MULTISCREEN_CUDA_EMULATED
  ::msemu::Launch<Kernel>(grid, block, shared_bytes, stream, std::forward<Args>(args)...);
#else
  Kernel<<<grid, block, shared_bytes, stream>>>(std::forward<Args>(args)...);
#endif
}

}  // namespace multiscreen::kernels::cuda
