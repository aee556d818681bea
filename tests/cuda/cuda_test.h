// The fixture of the CUDA tests: they skip, visibly, where no device is visible
// (the kernels are still compiled there). And what the op tests compare with:
// random inputs and the relative error ‖got − ref‖/‖ref‖.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/buffer.h"
#include "kernels/cuda/cuda_kernel_table.h"
#include "kernels/device_array.h"

namespace multiscreen {

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaAvailable()) {
      std::fprintf(stderr, "\n*** SKIPPED: no CUDA device visible; CUDA kernels were compiled but not run ***\n\n");
      GTEST_SKIP() << "no CUDA device visible";
    }
  }
};

using Floats = std::vector<float>;

// A CUDA test with the CUDA kernel table, for memory: device copies of host arrays.
class CudaKernelTableTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    absl::StatusOr<std::unique_ptr<kernels::KernelTable<float>>> table = kernels::cuda::MakeCudaKernelTable();
    ASSERT_TRUE(table.ok()) << table.status();
    table_ = std::move(*table);
  }

  // A device array holding `host` (kept until the test ends).
  float* Device(const Floats& host) {
    float* p = Empty(static_cast<int64_t>(host.size()));
    table_->Upload(host.data(), static_cast<int64_t>(host.size()), p);
    return p;
  }
  // A device array of n zeros.
  float* Empty(int64_t n) {
    arrays_.emplace_back(multiscreen::Device::kCuda);
    arrays_.back().Resize(std::max<int64_t>(n, 1));
    return arrays_.back().data();
  }
  Floats Host(const float* p, int64_t n) {
    Floats out(n);
    table_->Download(p, n, out.data());
    return out;
  }

  std::unique_ptr<kernels::KernelTable<float>> table_;
  std::vector<DeviceArray<float>> arrays_;
};

// n normal values of standard deviation stddev, from seed.
inline Floats Random(int64_t n, uint64_t seed, float stddev = 1.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, stddev);
  Floats x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

// ‖got − ref‖ / ‖ref‖ (‖got‖ when ref is zero); infinity when got has a NaN and ref does
// not. Any element type (float, double).
template <typename T>
double RelativeError(const std::vector<T>& got, const std::vector<T>& ref) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(ref[i])) return std::numeric_limits<double>::infinity();
    if (std::isnan(ref[i])) continue;
    diff += (double(got[i]) - double(ref[i])) * (double(got[i]) - double(ref[i]));
    norm += double(ref[i]) * double(ref[i]);
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

#define EXPECT_CLOSE(got, ref, tol)                                                       \
  do {                                                                                    \
    ASSERT_EQ((got).size(), (ref).size());                                                \
    const double err_ = ::multiscreen::RelativeError((got), (ref));                       \
    EXPECT_LE(err_, (tol)) << #got << " vs " << #ref << ": relative error " << err_;     \
  } while (0)

}  // namespace multiscreen
