#include "kernels/cpu/sum_squares.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/isa.h"

namespace multiscreen::kernels::cpu {
namespace {

// One block's Σ x[i]² in the header's order (16 partial sums, then pairwise).
template <typename Real>
struct BlockSumSquares {
  template <typename Target>
  MS_ALWAYS_INLINE static double Run(const Real* x, int64_t n) {
    constexpr int kParts = 16;
    double part[kParts] = {};
    int64_t i = 0;
    for (; i + kParts <= n; i += kParts) {
      for (int j = 0; j < kParts; ++j) part[j] += double(x[i + j]) * double(x[i + j]);
    }
    for (int j = 0; i + j < n; ++j) part[j] += double(x[i + j]) * double(x[i + j]);
    for (int width = kParts / 2; width > 0; width /= 2) {
      for (int j = 0; j < width; ++j) part[j] += part[j + width];
    }
    return part[0];
  }
};

}  // namespace

template <typename Real>
double SumSquaresBlocked(const Real* x, int64_t n, double init) {
  const int64_t blocks = (n + kSumSquaresBlock - 1) / kSumSquaresBlock;
  if (blocks <= 1) return n > 0 ? init + IsaDispatch<BlockSumSquares<Real>>(x, n) : init;
  std::vector<double> sums(blocks);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kSumSquaresBlock;
    sums[b] = IsaDispatch<BlockSumSquares<Real>>(x + begin, std::min(kSumSquaresBlock, n - begin));
  }
  double sum = init;
  for (double s : sums) sum += s;
  return sum;
}

template double SumSquaresBlocked<float>(const float*, int64_t, double);
template double SumSquaresBlocked<double>(const double*, int64_t, double);

}  // namespace multiscreen::kernels::cpu
