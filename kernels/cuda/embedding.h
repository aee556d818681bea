// Embedding lookup (spec step 1) on a CUDA device, the twin of kernels/cpu/embedding.h:
// rows [v0, v1) of the normalized table Ē on the device, token ids on the host.
// The backward is deterministic without atomics: the ids are grouped on the host into
// a CSR of positions per touched vocabulary row (ascending), and one block owns each
// touched row, adding its positions' rows in that order (the CPU's order). Host ids and
// the CSR reach the device from the table's pinned staging, one copy each; ids equal to the
// last uploaded ones (the backward's recomputed e^{s_E}·Ē[ids], a preloaded micro-batch)
// are not copied again (mirrored_upload.h). The CSR's size depends on the ids, so
// `bench train --graphs` runs EmbeddingBackward outside its captured micro-step.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/mirrored_upload.h"
#include "kernels/cuda/pinned_staging.h"
#include "kernels/device_array.h"

namespace multiscreen::kernels::cuda {

// Device and host staging memory of the embedding kernels, grown on demand and kept.
struct EmbeddingScratch {
  MirroredUpload<int32_t> ids;  // [count] forward ids
  // The backward's CSR, one array: [touched] shard-local rows (ascending), [touched + 1]
  // offsets into the positions, [kept] token positions n grouped by row.
  DeviceArray<int64_t> csr{Device::kCuda};
  std::vector<int64_t> host_start;  // [rows + 1] counting sort's starts
};

// out[n, :] = scale · table[ids[n] − v0, :] if v0 ≤ ids[n] < v1, else 0.
//   table: [v1 − v0, d] device; ids: [count] host; out: [count, d] device, written.
void EmbeddingForward(const float* table, int64_t v0, int64_t v1, int64_t d, const int32_t* ids, int64_t count,
                      float scale, float* out, EmbeddingScratch* scratch, PinnedStaging* staging,
                      cudaStream_t stream);

// dtable[ids[n] − v0, :] += scale · dout[n, :] for ids in the shard; repeated ids add
// in ascending n, each product rounded before its sum (no FMA), as the CPU's loop.
//   dout: [count, d] device; ids: [count] host; dtable: [v1 − v0, d] device.
void EmbeddingBackward(const float* dout, const int32_t* ids, int64_t count, int64_t v0, int64_t v1, int64_t d,
                       float scale, float* dtable, EmbeddingScratch* scratch, PinnedStaging* staging,
                       cudaStream_t stream);

}  // namespace multiscreen::kernels::cuda
