// A device array of host values uploaded through a table's pinned staging that remembers
// which values it holds (as issued on the stream), so that uploading the same values again
// is no copy at all (issue 42 part 2). The embedding's token ids and the head's targets go
// up this way: the embedding backward's recomputed e^{s_E}·Ē[ids] reads the forward's copy
// of the ids, and KernelTable::PreloadInputs copies a micro-batch's ids and targets before a
// captured micro-step is launched, so that the captured ops, given the same values, record
// no copy and read this array's fixed address.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/pinned_staging.h"
#include "kernels/device_array.h"

namespace multiscreen::kernels::cuda {

template <typename T>
class MirroredUpload {
 public:
  // The device copy [n] of host [n]: one cudaMemcpyAsync on `stream` from `staging`,
  // unless the last upload was of the same n values (then none: stream order makes the
  // earlier copy land before anything issued now reads it). A copy issued while `stream`
  // is being captured is a graph node that has not run: nothing is remembered then, and
  // the next upload copies. Failures are fatal (check.h), naming `op`.
  const T* Upload(const char* op, const T* host, int64_t n, PinnedStaging* staging, cudaStream_t stream) {
    if (held_valid_ && int64_t(held_.size()) == n && (n == 0 || std::memcmp(held_.data(), host, n * sizeof(T)) == 0)) {
      return device_.data();
    }
    device_.Resize(n);
    MS_CUDA_CHECK(op, cudaMemcpyAsync(device_.data(), staging->Stage(op, host, n), n * sizeof(T),
                                      cudaMemcpyHostToDevice, stream));
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    MS_CUDA_CHECK(op, cudaStreamIsCapturing(stream, &capture));
    held_valid_ = capture == cudaStreamCaptureStatusNone;
    held_.assign(host, host + n);
    return device_.data();
  }

 private:
  DeviceArray<T> device_{Device::kCuda};
  std::vector<T> held_;      // the values device_ holds once the stream reaches the last copy
  bool held_valid_ = false;  // held_ describes device_ (false: never uploaded, or copied in a capture)
};

}  // namespace multiscreen::kernels::cuda
