// kernels/cpu/sum_squares.h: the gradient norm's sum of squares, threaded, in a fixed order.
#include "kernels/cpu/sum_squares.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tests/kernels/isa_test.h"

namespace multiscreen::kernels::cpu {
namespace {

// The header's order written out serially: blocks of kSumSquaresBlock, 16 partial sums per
// block (i mod 16), combined j + 8, + 4, + 2, + 1, blocks added to init in order.
double SpelledOut(const std::vector<float>& x, double init) {
  const int64_t n = int64_t(x.size());
  double sum = init;
  for (int64_t b0 = 0; b0 < n; b0 += kSumSquaresBlock) {
    double part[16] = {};
    for (int64_t i = b0; i < std::min(n, b0 + kSumSquaresBlock); ++i) part[(i - b0) % 16] += double(x[i]) * x[i];
    for (int w = 8; w > 0; w /= 2) {
      for (int j = 0; j < w; ++j) part[j] += part[j + w];
    }
    sum += part[0];
  }
  return sum;
}

std::vector<float> Normal(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng) * std::exp(normal(rng));  // magnitudes over a few decades
  return x;
}

bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

class SumSquaresTest : public IsaTest {};
MS_INSTANTIATE_ON_EVERY_ISA(SumSquaresTest);

// Lengths around the 16 partial sums and the block size; init carried. The spelled-out order
// bit for bit on every path (each fp32 square is exact in fp64), within 1e-14 of a long-double
// sum, and the same bits on 1, 2 and 3 threads (the blocks' sums are added in block order).
TEST_P(SumSquaresTest, FollowsItsOrderBitForBitOnAnyThreadCount) {
  const int saved = omp_get_max_threads();
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(15), int64_t(16), int64_t(17), kSumSquaresBlock,
                    kSumSquaresBlock + 1, 5 * kSumSquaresBlock + 37}) {
    const std::vector<float> x = Normal(n, 7 + unsigned(n));
    const double init = 0.25;
    long double exact = init;
    for (float v : x) exact += (long double)v * v;
    const double want = SpelledOut(x, init);
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      const double got = SumSquaresBlocked(x.data(), n, init);
      EXPECT_TRUE(SameBits(got, want)) << "n = " << n << ", " << threads << " threads: " << got << " vs " << want;
      EXPECT_NEAR(got, double(exact), 1e-14 * double(exact)) << "n = " << n;
    }
  }
  omp_set_num_threads(saved);
}

// fp64 values: within 1e-14 of a long-double sum and the same bits on 1, 2 and 3 threads.
TEST_P(SumSquaresTest, Fp64SumIsCloseAndThreadCountIndependent) {
  const int saved = omp_get_max_threads();
  const std::vector<float> f = Normal(3 * kSumSquaresBlock + 11, 3);
  const std::vector<double> x(f.begin(), f.end());
  long double exact = 0;
  for (double v : x) exact += (long double)v * v;
  omp_set_num_threads(1);
  const double one = SumSquaresBlocked(x.data(), int64_t(x.size()), 0.0);
  EXPECT_NEAR(one, double(exact), 1e-14 * double(exact));
  for (int threads : {2, 3}) {
    omp_set_num_threads(threads);
    EXPECT_TRUE(SameBits(SumSquaresBlocked(x.data(), int64_t(x.size()), 0.0), one)) << threads << " threads";
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace multiscreen::kernels::cpu
