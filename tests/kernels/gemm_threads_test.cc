// kernels/cpu/gemm.h and gemm_bf16.h: a product's bits do not depend on the OpenMP thread count,
// on every path — OpenBLAS's own threading split products by the thread count and its Haswell
// kernels' sums changed with the split (the avx2 and generic paths' losses differed between 1
// and 2 threads in the last digits), and oneDNN (the avx512 path's fp32 products, every bf16
// one) split long weight-gradient reductions and scaled some products differently
// (kernels/cpu/onednn_matmul.h).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/onednn_matmul.h"
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
    // Weight gradients with a long reduction (A transposed, k ≥ kOnednnSplitK): oneDNN split
    // their k over the threads where C has few column blocks (12 × 8 on 2 threads, 256 × 256 on
    // 8, 64 × 160 on 8), so the avx512 path's bits followed the thread count.
    {true, false, 12, 8, 4096, 0}, {true, false, 256, 256, 4096, 1}, {true, false, 64, 160, 5000, 1},
    // A scaled product overwriting C (logits, e^{s_F} · y Ēᵀ): oneDNN's fp32 gemm:jit with an
    // output scale gave other bits on 1 thread than on 2 or more.
    {false, true, 512, 700, 256, 0},
};

// The thread counts compared with 1: past the CPUs too (oneDNN plans for the count it is given).
constexpr int kThreads[] = {2, 3, 4, 8};

// A, B and C of case c: normal values, the same for every precision.
struct Operands {
  std::vector<double> a, b, c;
};
Operands OperandsOf(const Case& c) {
  std::mt19937 rng(5);
  std::normal_distribution<double> normal(0.0, 1.0);
  Operands x{std::vector<double>(c.m * c.k), std::vector<double>(c.k * c.n), std::vector<double>(c.m * c.n)};
  for (auto* v : {&x.a, &x.b, &x.c}) {
    for (double& e : *v) e = normal(rng);
  }
  return x;
}

// C after Gemm<Real> (alpha 0.75, beta c.beta) on `threads` OpenMP threads; bf16: A and B
// rounded to bf16 and multiplied by GemmBf16 (oneDNN's bf16 matmul where the CPU has
// AVX512_BF16, else their fp32 widening through Gemm<float>).
template <typename Real, bool kBf16 = false>
std::vector<Real> Product(const Case& c, int threads) {
  const Operands x = OperandsOf(c);
  std::vector<Real> a(x.a.begin(), x.a.end()), b(x.b.begin(), x.b.end()), out(x.c.begin(), x.c.end());
  const int64_t lda = c.ta ? c.m : c.k, ldb = c.tb ? c.k : c.n;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  if constexpr (kBf16) {
    std::vector<uint16_t> a16(a.size()), b16(b.size());
    ToBf16(a.data(), int64_t(a.size()), a16.data(), nullptr);
    ToBf16(b.data(), int64_t(b.size()), b16.data(), nullptr);
    GemmBf16(c.ta, c.tb, c.m, c.n, c.k, 0.75f, a16.data(), lda, b16.data(), ldb, float(c.beta), out.data(), c.n);
  } else {
    Gemm<Real>(c.ta, c.tb, c.m, c.n, c.k, Real(0.75), a.data(), lda, b.data(), ldb, Real(c.beta), out.data(), c.n);
  }
  omp_set_num_threads(saved);
  return out;
}

// The fp64 product of the operands rounded to fp32 (or to bf16), alpha 0.75 as Product's.
std::vector<double> Reference(const Case& c, bool bf16) {
  const Operands x = OperandsOf(c);
  auto rounded = [bf16](const std::vector<double>& v) {
    std::vector<float> f(v.begin(), v.end());
    if (bf16) ToBf16(f.data(), int64_t(f.size()), nullptr, f.data());
    return std::vector<double>(f.begin(), f.end());
  };
  const std::vector<double> a = rounded(x.a), b = rounded(x.b);
  const double alpha = 0.75;
  std::vector<double> out(c.m * c.n);
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double sum = 0;
      for (int64_t l = 0; l < c.k; ++l) sum += (c.ta ? a[l * c.m + i] : a[i * c.k + l]) * (c.tb ? b[j * c.k + l] : b[l * c.n + j]);
      out[i * c.n + j] = alpha * sum + c.beta * double(float(x.c[i * c.n + j]));
    }
  }
  return out;
}

class GemmThreadsTest : public IsaTest {};
MS_INSTANTIATE_ON_EVERY_ISA(GemmThreadsTest);

template <typename Real, bool kBf16 = false>
void ExpectSameBitsOnAnyThreadCount() {
  for (const Case& c : kCases) {
    const std::vector<Real> one = Product<Real, kBf16>(c, 1);
    for (int threads : kThreads) {
      const std::vector<Real> got = Product<Real, kBf16>(c, threads);
      int64_t differ = 0;
      for (size_t i = 0; i < got.size(); ++i) differ += std::memcmp(&got[i], &one[i], sizeof(Real)) != 0;
      EXPECT_EQ(differ, 0) << c.m << "x" << c.n << "x" << c.k << " ta " << c.ta << " tb " << c.tb << ", " << threads
                           << " threads against 1";
    }
  }
}

TEST_P(GemmThreadsTest, Fp32ProductIsTheSameBitsOnAnyThreadCount) { ExpectSameBitsOnAnyThreadCount<float>(); }
TEST_P(GemmThreadsTest, Fp64ProductIsTheSameBitsOnAnyThreadCount) { ExpectSameBitsOnAnyThreadCount<double>(); }
TEST_P(GemmThreadsTest, Bf16ProductIsTheSameBitsOnAnyThreadCount) { ExpectSameBitsOnAnyThreadCount<float, true>(); }

// The long reductions cut into chunks along k (A transposed, B either way, β = 0 and 1, the
// scale applied once to the chunks' sum) are still the product: fp32 and bf16 on 2 threads
// against the fp64 product of the same rounded operands.
TEST_P(GemmThreadsTest, ChunkedLongReductionsAreTheProduct) {
  const Case chunked[] = {{true, false, 12, 8, 4096, 0}, {true, false, 64, 160, 5000, 1}, {true, true, 96, 40, 3000, 0},
                          {true, true, 33, 17, 2500, 1}};
  for (const Case& c : chunked) {
    ASSERT_GE(c.k, kOnednnSplitK);
    for (bool bf16 : {false, true}) {
      const std::vector<float> got = bf16 ? Product<float, true>(c, 2) : Product<float>(c, 2);
      const std::vector<double> want = Reference(c, bf16);
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
      // fp32 sums of k terms of unit variance: about sqrt(k) · 2^-24 · a few.
      EXPECT_LT(worst, 1e-5 * std::sqrt(double(c.k))) << c.m << "x" << c.n << "x" << c.k << " ta " << c.ta << " tb "
                                                      << c.tb << (bf16 ? " bf16" : " fp32");
    }
  }
}

}  // namespace
}  // namespace multiscreen::kernels::cpu
