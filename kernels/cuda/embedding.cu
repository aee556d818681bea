// Embedding gather and its deterministic scatter-add on a CUDA device (embedding.h).
#include "kernels/cuda/embedding.h"

#include <algorithm>

#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"

namespace multiscreen::kernels::cuda {
namespace {

__global__ void GatherKernel(const float* table, int64_t v0, int64_t v1, int64_t d, const int32_t* ids, int64_t count,
                             float scale, float* out) {
  const int64_t n_all = count * d;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_all; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / d, c = i % d;
    const int64_t id = ids[n];
    out[i] = (id < v0 || id >= v1) ? 0.f : scale * table[(id - v0) * d + c];
  }
}

// Block b owns table row rows[b]: adds scale · dout[p, :] for its positions p in order.
__global__ void ScatterKernel(const float* dout, const int64_t* rows, const int64_t* offsets, const int64_t* positions,
                              int64_t d, float scale, float* dtable) {
  float* dst = dtable + rows[blockIdx.x] * d;
  const int64_t p0 = offsets[blockIdx.x], p1 = offsets[blockIdx.x + 1];
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    float acc = dst[c];
    for (int64_t p = p0; p < p1; ++p) acc = __fadd_rn(acc, __fmul_rn(scale, dout[positions[p] * d + c]));
    dst[c] = acc;
  }
}

}  // namespace

void EmbeddingForward(const float* table, int64_t v0, int64_t v1, int64_t d, const int32_t* ids, int64_t count,
                      float scale, float* out, EmbeddingScratch* scratch, PinnedStaging* staging,
                      cudaStream_t stream) {
  if (count <= 0 || d <= 0) return;
  const int32_t* ids_dev = scratch->ids.Upload("EmbeddingForward", ids, count, staging, stream);
  Launch<GatherKernel>(BlocksFor(count * d), kThreads, 0, stream, table, v0, v1, d, ids_dev, count, scale, out);
  MS_CUDA_CHECK_LAUNCH("EmbeddingForward");
}

void EmbeddingBackward(const float* dout, const int32_t* ids, int64_t count, int64_t v0, int64_t v1, int64_t d,
                       float scale, float* dtable, EmbeddingScratch* scratch, PinnedStaging* staging,
                       cudaStream_t stream) {
  if (count <= 0 || d <= 0 || v1 <= v0) return;
  // Counting sort of the positions by shard-local row (stable: ascending n within a row).
  const int64_t vocab = v1 - v0;
  std::vector<int64_t>& start = scratch->host_start;
  start.assign(vocab + 1, 0);
  for (int64_t n = 0; n < count; ++n) {
    if (ids[n] >= v0 && ids[n] < v1) ++start[ids[n] - v0 + 1];
  }
  for (int64_t v = 0; v < vocab; ++v) start[v + 1] += start[v];
  const int64_t kept = start[vocab];
  if (kept == 0) return;
  int64_t touched = 0;
  for (int64_t v = 0; v < vocab; ++v) touched += start[v + 1] > start[v] ? 1 : 0;
  // The CSR [rows (touched) | offsets (touched + 1) | positions (kept)], written straight
  // into pinned memory and uploaded in one copy.
  const char* op = "EmbeddingBackward";
  const int64_t csr_size = 2 * touched + 1 + kept;
  int64_t* csr = static_cast<int64_t*>(staging->Reserve(op, csr_size * sizeof(int64_t)));
  int64_t *rows = csr, *offsets = csr + touched, *positions = csr + 2 * touched + 1;
  int64_t b = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    if (start[v + 1] > start[v]) {
      rows[b] = v;
      offsets[b++] = start[v];
    }
  }
  offsets[touched] = kept;
  for (int64_t n = 0; n < count; ++n) {  // start[v] becomes the cursor of row v
    if (ids[n] >= v0 && ids[n] < v1) positions[start[ids[n] - v0]++] = n;
  }
  scratch->csr.Resize(csr_size);
  MS_CUDA_CHECK(op, cudaMemcpyAsync(scratch->csr.data(), csr, csr_size * sizeof(int64_t), cudaMemcpyHostToDevice,
                                    stream));
  const int64_t* dev = scratch->csr.data();
  const int threads = static_cast<int>(std::min<int64_t>(kThreads, ((d + 31) / 32) * 32));
  Launch<ScatterKernel>(static_cast<unsigned>(touched), threads, 0, stream, dout, dev, dev + touched,
                        dev + 2 * touched + 1, d, scale, dtable);
  MS_CUDA_CHECK_LAUNCH(op);
}

}  // namespace multiscreen::kernels::cuda
