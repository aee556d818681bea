// The device argmax (kernels/cuda/argmax.h, KernelTable::Argmax) against the CPU's
// (kernels/cpu/argmax.h) and against the index each case plants: lengths below, at and
// past the block's 1024 threads and not a multiple of it, GPT-2's V = 50,257; ties between
// threads' shares and within one, ±inf, ±0, NaN (the first one wins on both). Skips,
// visibly, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/argmax.h"
#include "tests/cuda/cuda_test.h"

namespace multiscreen {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

class ArgmaxCudaTest : public CudaKernelTableTest {
 protected:
  // The device's argmax of x, checked against the CPU's and `want`.
  void Expect(const Floats& x, int64_t want, const std::string& what) {
    const int64_t n = static_cast<int64_t>(x.size());
    const int64_t cpu = kernels::cpu::Argmax(x.data(), n);
    EXPECT_EQ(cpu, want) << what << " (cpu)";
    EXPECT_EQ(table_->Argmax(Device(x), n), want) << what << " (cuda), n " << n;
  }
};

TEST_F(ArgmaxCudaTest, FindsTheLowestIndexOfTheLargestValueAtEveryLength) {
  for (int64_t n : {1, 2, 31, 1000, 1023, 1024, 1025, 2048, 3001, 50257}) {
    // Random values on a coarse grid below 10, with the maximum 10 planted in three
    // threads' shares (i, i + 1024, ...) and in one share twice: the lowest wins.
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::uniform_int_distribution<int> grid(-40, 39);
    Floats x(n);
    for (float& v : x) v = 0.25f * grid(rng);
    Expect(x, kernels::cpu::Argmax(x.data(), n), "random " + std::to_string(n));
    const int64_t first = n / 3;
    for (int64_t i : {n - 1, first + 2048, first + 1024, first + 5, first}) {
      if (i < n) x[i] = 10.f;
    }
    Expect(x, first, "ties " + std::to_string(n));
    x.assign(n, -kInf);
    Expect(x, 0, "all -inf " + std::to_string(n));
    x[n - 1] = kInf;
    Expect(x, n - 1, "+inf last " + std::to_string(n));
  }
  table_->Synchronize();
  EXPECT_EQ(table_->Argmax(Empty(1), 0), -1);  // nothing to pick, nothing launched
}

TEST_F(ArgmaxCudaTest, TheFirstNanWinsAndSignedZerosTie) {
  const int64_t n = 50257;
  Floats x = Random(n, 3);
  x[40000] = kNan;
  x[1500] = kNan;
  x[77] = 1e30f;
  Expect(x, 1500, "two NaNs");
  Floats z(n, -1.f);
  z[3000] = 0.f;
  z[2000] = -0.f;
  Expect(z, 2000, "-0 before +0");
  Floats all(n, kNan);
  Expect(all, 0, "all NaN");
}

}  // namespace
}  // namespace multiscreen
