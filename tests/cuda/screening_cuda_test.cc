// CUDA screening forward against the CPU kernel, and a timing on the device.
// Skips, visibly, without a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/buffer.h"
#include "kernels/device_array.h"
#include "tests/cuda/cuda_test.h"
#include "kernels/cpu/screening.h"
#include "kernels/cuda/screening.h"

namespace multiscreen {
namespace {

class CudaScreeningTest : public CudaTest {};

struct Problem {
  kernels::cpu::ScreeningShape shape;
  std::vector<kernels::cpu::TileScalars> tiles;
  std::vector<float> P;
  Problem(int64_t B, int64_t T, int64_t nt, int64_t dk, int64_t dv, uint64_t seed) {
    shape = {B, T, nt, dk, dv, 0, 256.0};
    std::mt19937 rng(seed);
    std::normal_distribution<float> n(0.f, 1.f);
    P.resize(B * T * nt * shape.p_cols());
    for (auto& x : P) x = n(rng);
    // Windows below T, past w_th, and infinite; Trim widths that reject a real share.
    const double ws[] = {3.5, 40.0, 300.0, std::numeric_limits<double>::infinity()};
    const double rs[] = {0.9, 0.5, 0.7, 0.3};
    for (int64_t t = 0; t < nt; ++t) {
      const double w = ws[t % 4];
      tiles.push_back({w, rs[t % 4], 0.5 + 0.1 * t, std::isinf(w) ? 300.0 : w});
    }
  }
};

std::vector<float> RunCpu(const Problem& p) {
  const int64_t rows = p.shape.batch * p.shape.seq * p.shape.tiles;
  std::vector<float> qt(rows * p.shape.d_k), kt(rows * p.shape.d_k), vb(rows * p.shape.d_v), h(rows * p.shape.d_v);
  std::vector<float> qn(rows), kn(rows), vn(rows), U(rows * p.shape.d_v);
  kernels::cpu::ScreeningForward(p.shape, p.P.data(), p.tiles.data(),
                                 {qt.data(), kt.data(), vb.data(), qn.data(), kn.data(), vn.data(), h.data()}, U.data());
  return U;
}

std::vector<float> RunCuda(const Problem& p, double* ms = nullptr) {
  const int64_t rows = p.shape.batch * p.shape.seq * p.shape.tiles;
  auto array = [](int64_t n) {
    DeviceArray<float> a(Device::kCuda);
    a.Resize(n);
    return a;
  };
  DeviceArray<float> P = array(p.P.size()), U = array(rows * p.shape.d_v);
  DeviceArray<float> qt = array(rows * p.shape.d_k), kt = array(rows * p.shape.d_k), vb = array(rows * p.shape.d_v);
  DeviceArray<float> qn = array(rows), kn = array(rows), vn = array(rows), h = array(rows * p.shape.d_v);
  const kernels::ScreeningSaved<float> saved{qt.data(), kt.data(), vb.data(), qn.data(), kn.data(), vn.data(), h.data()};
  EXPECT_EQ(cudaMemcpy(P.data(), p.P.data(), p.P.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  kernels::cuda::ScreeningScratch scratch;
  auto run = [&] { kernels::cuda::ScreeningForward(p.shape, P.data(), p.tiles.data(), saved, U.data(), &scratch, 0); };
  run();
  if (ms != nullptr) {
    cudaDeviceSynchronize();
    const auto start = std::chrono::steady_clock::now();
    const int reps = 5;
    for (int i = 0; i < reps; ++i) run();
    cudaDeviceSynchronize();
    *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / reps;
  }
  std::vector<float> out(rows * p.shape.d_v);
  EXPECT_EQ(cudaMemcpy(out.data(), U.data(), out.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

TEST_F(CudaScreeningTest, ForwardMatchesTheCpuKernel) {
  const Problem p(2, 300, 4, 16, 64, 1);
  const std::vector<float> cpu = RunCpu(p), gpu = RunCuda(p);
  double max_err = 0, max_ref = 0;
  int nonzero = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    max_err = std::max(max_err, double(std::abs(cpu[i] - gpu[i])));
    max_ref = std::max(max_ref, double(std::abs(cpu[i])));
    nonzero += cpu[i] != 0.f;
  }
  std::fprintf(stderr, "max |cuda - cpu| = %.3g (max |cpu| = %.3g, %d nonzero)\n", max_err, max_ref, nonzero);
  EXPECT_GT(nonzero, int(cpu.size() / 4));
  EXPECT_LT(max_err, 2e-5 * std::max(1.0, max_ref));
}

TEST_F(CudaScreeningTest, TimesAPsi32LayerAtTrainingLength) {
#ifdef MULTISCREEN_CUDA_EMULATED
  GTEST_SKIP() << "a time on the emulated device means nothing (the kernels are checked at smaller shapes above)";
#endif
  // Ψ = 32 layer: 32 tiles, T = 4096, B = 1, the paper's d_K and d_V; windows as above.
  const Problem p(1, 4096, 32, 16, 64, 2);
  double ms = 0;
  RunCuda(p, &ms);
  std::fprintf(stderr, "cuda screening forward, B=1 T=4096 tiles=32: %.3f ms per layer\n", ms);
  EXPECT_GT(ms, 0.0);
}

}  // namespace
}  // namespace multiscreen
