// Argmax on a CUDA device, the twin of kernels/cpu/argmax.h and in its order (the lowest
// index of the largest value; the lowest index of a NaN if there is one): greedy
// decoding's next token taken where the logits are, so one int32 crosses to the host
// instead of V floats (issue 29).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace multiscreen::kernels::cuda {

// The argmax of x [n] (device fp32), as cpu::Argmax returns it, bit for bit: one block of
// threads, each taking the first of its strided share in index order, then a tree over the
// block in the same order (a strict total order, so the result does not depend on the
// tree). result: one int32 of device scratch the index is written to, then copied to the
// host (4 bytes); waits for it. −1 when n ≤ 0 (nothing launched). n < 2^31, else fatal.
int64_t Argmax(const float* x, int64_t n, int32_t* result, cudaStream_t stream);

}  // namespace multiscreen::kernels::cuda
