// Launch shapes shared by the simple CUDA kernels of kernels/cuda: a block of
// kThreads threads, and a grid for n independent elements walked with a grid-stride
// loop (capped so that the grid never exceeds what every device accepts). And Launch,
// the one place a kernel is launched: <<<>>> under nvcc, the emulated device's launch
// (cuda_emulator/device.h) in the emulated build; timed by device events under its
// reported name while bench's --op_times records (kernel_times.h).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "kernels/cuda/kernel_name.h"
#include "kernels/cuda/kernel_times.h"

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
  const bool timed = KernelTimesOn();
  if (timed) KernelTimesBegin(stream);
#ifdef MULTISCREEN_CUDA_EMULATED
  ::msemu::Launch<Kernel>(grid, block, shared_bytes, stream, std::forward<Args>(args)...);
#else
  Kernel<<<grid, block, shared_bytes, stream>>>(std::forward<Args>(args)...);
#endif
  if (timed) {
    static const std::string name = ReportedKernelName(__PRETTY_FUNCTION__, __BASE_FILE__);
    KernelTimesEnd(name, stream);
  }
}

}  // namespace multiscreen::kernels::cuda
