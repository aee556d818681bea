// TableStream (table_stream.h): one blocking stream per device, made on first use under
// a lock and never destroyed (tables of the process may issue on it until exit).
#include "kernels/cuda/table_stream.h"

#include <map>
#include <mutex>

#include "kernels/cuda/check.h"

namespace multiscreen::kernels::cuda {

cudaStream_t TableStream() {
  static std::mutex mutex;
  static auto* streams = new std::map<int, cudaStream_t>();  // by device; lives until exit
  int device = 0;
  MS_CUDA_CHECK("TableStream", cudaGetDevice(&device));
  std::lock_guard lock(mutex);
  auto [it, created] = streams->emplace(device, nullptr);
  if (created) {
    // Blocking (cudaStreamDefault flags): it and the legacy default stream wait for each other.
    if (const cudaError_t e = cudaStreamCreate(&it->second); e != cudaSuccess) {
      streams->erase(it);
      FatalCudaError("TableStream", cudaGetErrorString(e));
    }
  }
  return it->second;
}

}  // namespace multiscreen::kernels::cuda
