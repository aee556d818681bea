// Launch shapes shared by the simple CUDA kernels of kernels/cuda: a block of
// kThreads threads, and a grid for n independent elements walked with a grid-stride
// loop (capped so that the grid never exceeds what every device accepts).
#pragma once

#include <algorithm>
#include <cstdint>

namespace multiscreen::kernels::cuda {

inline constexpr int kThreads = 256;

// Blocks for n elements at kThreads per block, at least 1 and at most 65535·16.
inline unsigned BlocksFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, int64_t(65535) * 16));
}

}  // namespace multiscreen::kernels::cuda
