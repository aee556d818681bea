// The one CUDA stream every kernel table, Transformer table and decoding cache of a
// process issues on, per device (issue 42): a blocking stream (cudaStreamCreate, not
// cudaStreamNonBlocking) made on first use. Work on the legacy default stream — a
// synchronous cudaMemcpy or cudaMemset, a CudaBuffer's copies — still orders with it
// both ways, as when the tables issued on the legacy stream themselves, so the ops of
// different tables run in the order the host issues them; and unlike the legacy stream
// it can be captured into a CUDA graph (cudaStreamBeginCapture).
#pragma once

#include <cuda_runtime.h>

namespace multiscreen::kernels::cuda {

// The table stream of the calling thread's current device (cudaGetDevice), created on
// the first call for that device and kept for the life of the process; thread-safe.
// Failures (no device, cudaStreamCreate's error) are fatal (check.h), naming TableStream.
cudaStream_t TableStream();

}  // namespace multiscreen::kernels::cuda
