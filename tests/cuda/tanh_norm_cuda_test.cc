// CUDA TanhNorm against the CPU reference. Skips, visibly, without a GPU.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/buffer.h"
#include "tests/cuda/cuda_test.h"
#include "kernels/cpu/tanh_norm.h"
#include "kernels/cuda/tanh_norm.h"

namespace multiscreen {
namespace {

TEST_F(CudaTest, TanhNormForwardAndBackwardMatchTheCpu) {
  const int64_t rows = 1000, d = 64;
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> h(rows * d), du(rows * d);
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = r % 3 == 0 ? 1e-3f : r % 3 == 1 ? 0.05f : 1.f;  // both sides of the series switch
    for (int64_t c = 0; c < d; ++c) h[r * d + c] = scale * n(rng);
  }
  for (auto& x : du) x = n(rng);
  for (int64_t c = 0; c < d; ++c) h[5 * d + c] = 0.f;  // a zero row
  std::vector<float> u_cpu(rows * d), dh_cpu(rows * d), u_gpu(rows * d), dh_gpu(rows * d);
  kernels::cpu::TanhNormForward(h.data(), u_cpu.data(), rows, d);
  kernels::cpu::TanhNormBackward(h.data(), du.data(), dh_cpu.data(), rows, d);

  const size_t bytes = rows * d * sizeof(float);
  auto dev_h = Buffer::Allocate(Device::kCuda, bytes);
  auto dev_du = Buffer::Allocate(Device::kCuda, bytes);
  auto dev_u = Buffer::Allocate(Device::kCuda, bytes);
  auto dev_dh = Buffer::Allocate(Device::kCuda, bytes);
  ASSERT_TRUE(dev_h.ok() && dev_du.ok() && dev_u.ok() && dev_dh.ok());
  ASSERT_TRUE(dev_h->Upload(h.data(), bytes).ok());
  ASSERT_TRUE(dev_du->Upload(du.data(), bytes).ok());
  ASSERT_TRUE(kernels::cuda::TanhNormForward(dev_h->as<float>(), dev_u->as<float>(), rows, d).ok());
  ASSERT_TRUE(kernels::cuda::TanhNormBackward(dev_h->as<float>(), dev_du->as<float>(), dev_dh->as<float>(), rows, d).ok());
  ASSERT_TRUE(dev_u->Download(u_gpu.data(), bytes).ok());
  ASSERT_TRUE(dev_dh->Download(dh_gpu.data(), bytes).ok());
  for (int64_t i = 0; i < rows * d; ++i) {
    ASSERT_NEAR(u_gpu[i], u_cpu[i], 1e-6f * (1 + std::abs(u_cpu[i]))) << i;
    ASSERT_NEAR(dh_gpu[i], dh_cpu[i], 2e-5f * (1 + std::abs(dh_cpu[i]))) << i;
  }
  EXPECT_EQ(u_gpu[5 * d], 0.f);
}

}  // namespace
}  // namespace multiscreen
