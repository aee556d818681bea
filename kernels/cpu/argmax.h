// Argmax over a vector of logits (greedy decoding's next token, model/decoder.h): the CPU
// reference of kernels/cuda/argmax.h, and the order both take the largest in.
//
// The order (ArgmaxBefore): x_i comes before x_j (i ≠ j) when x_i is NaN and x_j is not;
// or neither is NaN and x_i > x_j; or they tie (equal values, −0 = +0, or both NaN) and
// i < j. It is a strict total order on the indices, so the first index in it is the same
// whatever order a reduction visits the elements in (the device's tree, the CPU's loop):
// the lowest index of the largest value, or the lowest index of a NaN if there is one (as
// numpy.argmax and torch.argmax; ±inf are values like any other).
//
// Kept C++17 and free of host-only calls: the CUDA kernel includes it for ArgmaxBefore.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MS_ARGMAX_HOST_DEVICE __host__ __device__
#else
#define MS_ARGMAX_HOST_DEVICE
#endif

namespace multiscreen::kernels::cpu {

// Whether (a, i) comes before (b, j) in the argmax order above (i ≠ j). NaN is tested as
// a != a, which holds on the host and the device alike.
template <typename Real>
MS_ARGMAX_HOST_DEVICE inline bool ArgmaxBefore(Real a, int64_t i, Real b, int64_t j) {
  const bool a_nan = a != a, b_nan = b != b;
  if (a_nan != b_nan) return a_nan;
  if (!a_nan && a != b) return a > b;
  return i < j;
}

// The index of the first element of x [n] (host) in the argmax order: the lowest index of
// the largest value, or of the first NaN. −1 when n ≤ 0 (nothing to pick).
template <typename Real>
int64_t Argmax(const Real* x, int64_t n);

}  // namespace multiscreen::kernels::cpu
