// kernels/cpu/gemm.h: a product's bits do not depend on the OpenMP thread count, on every
// path — OpenBLAS's own threading split products by the thread count and its Haswell kernels'
// sums changed with the split (the avx2 and generic paths' losses differed between 1 and 2
// threads in the last digits).
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "tests/kernels/isa_test.h"

namespace multiscreen::kernels::cpu {
namespace {

struct Case {
  bool ta, tb;
  int64_t m, n, k;
  double beta;
};

// Products past OpenBLAS's threading threshold (m·n·k > 2^18): tall, wide, thin, both
// transposes, a partial last block, β = 0 and 1, one that fits in a single block, and
// single rows (OpenBLAS's gemv: its own threading gave other bits on 3 threads).
// tests/CMakeLists.txt runs these under OMP_THREAD_LIMIT=1 too, where a loop's team is one
// thread: a threaded OpenBLAS call inside one spun forever.
const Case kCases[] = {
    {false, false, 600, 520, 64, 0}, {true, false, 64, 1280, 300, 1}, {false, true, 300, 48, 2560, 1},
    {true, true, 130, 700, 90, 0},   {false, false, 200, 180, 800, 1},
    // One row (a decoded token's products: gemv), B either way, past a block.
    {false, false, 1, 1280, 640, 0}, {false, true, 1, 1500, 512, 1},
};

template <typename Real>
std::vector<Real> Product(const Case& c, int threads) {
  std::mt19937 rng(5);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<Real> a(c.m * c.k), b(c.k * c.n), out(c.m * c.n);
  for (Real& x : a) x = Real(normal(rng));
  for (Real& x : b) x = Real(normal(rng));
  for (Real& x : out) x = Real(normal(rng));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  Gemm<Real>(c.ta, c.tb, c.m, c.n, c.k, Real(0.75), a.data(), c.ta ? c.m : c.k, b.data(), c.tb ? c.k : c.n,
             Real(c.beta), out.data(), c.n);
  omp_set_num_threads(saved);
  return out;
}

class GemmThreadsTest : public IsaTest {};
MS_INSTANTIATE_ON_EVERY_ISA(GemmThreadsTest);

template <typename Real>
void ExpectSameBitsOnAnyThreadCount() {
  for (const Case& c : kCases) {
    const std::vector<Real> one = Product<Real>(c, 1);
    for (int threads : {2, 3}) {
      const std::vector<Real> got = Product<Real>(c, threads);
      int64_t differ = 0;
      for (size_t i = 0; i < got.size(); ++i) differ += std::memcmp(&got[i], &one[i], sizeof(Real)) != 0;
      EXPECT_EQ(differ, 0) << c.m << "x" << c.n << "x" << c.k << " ta " << c.ta << " tb " << c.tb << ", " << threads
                           << " threads against 1";
    }
  }
}

TEST_P(GemmThreadsTest, Fp32ProductIsTheSameBitsOnAnyThreadCount) { ExpectSameBitsOnAnyThreadCount<float>(); }
TEST_P(GemmThreadsTest, Fp64ProductIsTheSameBitsOnAnyThreadCount) { ExpectSameBitsOnAnyThreadCount<double>(); }

}  // namespace
}  // namespace multiscreen::kernels::cpu
