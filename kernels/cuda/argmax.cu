// Argmax on a CUDA device (argmax.h): one block of kArgmaxThreads, a strided scan per
// thread, a shared-memory tree, one int32 back to the host.
#include "kernels/cuda/argmax.h"

#include <cstdint>

#include "kernels/cpu/argmax.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"

namespace multiscreen::kernels::cuda {
namespace {

// One block: a vocabulary of 50,257 is about 50 elements a thread.
constexpr int kArgmaxThreads = 1024;

__global__ void ArgmaxKernel(const float* x, int64_t n, int32_t* result) {
  __shared__ float value[kArgmaxThreads];
  __shared__ int64_t index[kArgmaxThreads];  // −1: a thread past n holds nothing
  const int t = threadIdx.x;
  // The thread's share t, t + T, t + 2T, …: ascending, so a tie keeps the earlier one.
  int64_t best = t < n ? t : -1;
  float v = best >= 0 ? x[best] : 0.f;
  for (int64_t i = int64_t(t) + kArgmaxThreads; i < n; i += kArgmaxThreads) {
    if (cpu::ArgmaxBefore(x[i], i, v, best)) v = x[i], best = i;
  }
  value[t] = v;
  index[t] = best;
  __syncthreads();
  for (int half = kArgmaxThreads / 2; half > 0; half /= 2) {
    if (t < half) {
      const int64_t j = index[t + half];
      if (j >= 0 && (index[t] < 0 || cpu::ArgmaxBefore(value[t + half], j, value[t], index[t]))) {
        value[t] = value[t + half];
        index[t] = j;
      }
    }
    __syncthreads();
  }
  if (t == 0) *result = static_cast<int32_t>(index[0]);
}

}  // namespace

int64_t Argmax(const float* x, int64_t n, int32_t* result, cudaStream_t stream) {
  if (n <= 0) return -1;
  if (n > INT32_MAX) FatalCudaError("Argmax", "2^31 or more elements (the index is an int32)");
  Launch<ArgmaxKernel>(1, kArgmaxThreads, 0, stream, x, n, result);
  MS_CUDA_CHECK_LAUNCH("Argmax");
  int32_t host = -1;
  MS_CUDA_CHECK("Argmax", cudaMemcpyAsync(&host, result, sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  MS_CUDA_CHECK("Argmax", cudaStreamSynchronize(stream));
  return host;
}

}  // namespace multiscreen::kernels::cuda
