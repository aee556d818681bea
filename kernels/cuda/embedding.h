// Embedding lookup (spec step 1) on a CUDA device, the twin of kernels/cpu/embedding.h:
// rows [v0, v1) of the normalized table Ē on the device, token ids on the host.
// The backward is deterministic without atomics: the ids are grouped on the host into
// a CSR of positions per touched vocabulary row (ascending), and one block owns each
// touched row, adding its positions' rows in that order (the CPU's order).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/device_array.h"

namespace multiscreen::kernels::cuda {

// Device and host staging memory of the embedding kernels, grown on demand and kept.
struct EmbeddingScratch {
  DeviceArray<int32_t> ids{Device::kCuda};        // [count] forward ids
  DeviceArray<int32_t> rows{Device::kCuda};       // [touched] shard-local rows, ascending
  DeviceArray<int64_t> offsets{Device::kCuda};    // [touched + 1] into positions
  DeviceArray<int64_t> positions{Device::kCuda};  // token positions n, grouped by row
  std::vector<int32_t> host_rows;
  std::vector<int64_t> host_offsets, host_positions, host_start;
};

// out[n, :] = scale · table[ids[n] − v0, :] if v0 ≤ ids[n] < v1, else 0.
//   table: [v1 − v0, d] device; ids: [count] host; out: [count, d] device, written.
void EmbeddingForward(const float* table, int64_t v0, int64_t v1, int64_t d, const int32_t* ids, int64_t count,
                      float scale, float* out, EmbeddingScratch* scratch, cudaStream_t stream);

// dtable[ids[n] − v0, :] += scale · dout[n, :] for ids in the shard; repeated ids add
// in ascending n, each product rounded before its sum (no FMA), as the CPU's loop.
//   dout: [count, d] device; ids: [count] host; dtable: [v1 − v0, d] device.
void EmbeddingBackward(const float* dout, const int32_t* ids, int64_t count, int64_t v0, int64_t v1, int64_t d,
                       float scale, float* dtable, EmbeddingScratch* scratch, cudaStream_t stream);

}  // namespace multiscreen::kernels::cuda
