// AdamW against torch.optim.AdamW (values from tools/make_adamw_goldens.py),
// learning-rate schedules, and dynamic loss scaling.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <vector>

#include "kernels/cpu/adamw.h"
#include "kernels/kernel_table.h"
#include "nlohmann/json.hpp"
#include "trainer/adamw.h"
#include "trainer/loss_scaler.h"
#include "trainer/lr_schedule.h"

namespace multiscreen {
namespace {

TEST(AdamWTest, MatchesTorchAdamWStepByStep) {
  std::ifstream in(std::string(MULTISCREEN_SOURCE_DIR) + "/tests/trainer/testdata/adamw_golden.json");
  ASSERT_TRUE(in) << "missing adamw_golden.json";
  const nlohmann::json g = nlohmann::json::parse(in);
  std::vector<float> params;
  for (double x : g["init"]) params.push_back(static_cast<float>(x));
  std::vector<uint8_t> decay;
  for (int x : g["decay"]) decay.push_back(static_cast<uint8_t>(x));
  AdamW opt(params.size(), {g["beta1"], g["beta2"], g["eps"], g["weight_decay"]}, decay);
  for (size_t s = 0; s < g["lrs"].size(); ++s) {
    std::vector<float> grads;
    for (double x : g["grads"][s]) grads.push_back(static_cast<float>(x));
    opt.Step(params.data(), grads.data(), g["lrs"][s]);
    for (size_t i = 0; i < params.size(); ++i) {
      const double expected = g["params"][s][i];
      EXPECT_NEAR(params[i], expected, 2e-7 * (1 + std::abs(expected))) << "step " << s << " param " << i;
    }
  }
  EXPECT_EQ(opt.step(), 6);
}

// The optimizer's state on the step's device (DeviceArray moments and decay mask, the
// update through the kernel table) is, on the CPU table, the host kernel the trainer
// called before the state moved (kernels/cpu/adamw.h over std::vectors): bit for bit,
// over steps with weight decay on some elements only, and on a sub-range (ZeRO-1's
// shard) of a larger buffer.
TEST(AdamWTest, DeviceArrayStateOnTheCpuTableIsTheHostKernelBitForBit) {
  const int64_t n = 4099, begin = 1000;
  auto table = MakeKernelTable<float>(Device::kCpu);
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<float> params(n), host_params(n), host_m(n - begin, 0.f), host_v(n - begin, 0.f);
  std::vector<uint8_t> decay(n - begin);
  for (int64_t i = 0; i < n; ++i) params[i] = host_params[i] = std::sin(0.37f * float(i)) * 0.2f;
  for (int64_t i = 0; i < n - begin; ++i) decay[i] = i % 5 != 0;
  const AdamWHyper hyper{0.9, 0.95, 1e-8, 0.1};
  AdamW opt(n - begin, hyper, decay, table->get());
  EXPECT_EQ(opt.device(), Device::kCpu);
  DeviceArray<float> device_params(Device::kCpu), grads(Device::kCpu);
  device_params.Resize(n);
  device_params.CopyFromHost(params.data());
  grads.Resize(n);
  for (int64_t step = 1; step <= 5; ++step) {
    std::vector<float> g(n);
    for (int64_t i = 0; i < n; ++i) g[i] = std::cos(0.11f * float(i * step)) * (i % 7 == 0 ? 1e-3f : 0.5f);
    grads.CopyFromHost(g.data());
    const double lr = 0.0625 / double(step);
    opt.Step(device_params.data() + begin, grads.data() + begin, lr);
    kernels::cpu::AdamWUpdate(MakeAdamWArgs(hyper, lr, step, decay.data()), host_params.data() + begin,
                              g.data() + begin, host_m.data(), host_v.data(), n - begin);
    ASSERT_EQ(device_params.ToHost(), host_params) << "step " << step;
    ASSERT_EQ(opt.m().ToHost(), host_m) << "step " << step;
    ASSERT_EQ(opt.v().ToHost(), host_v) << "step " << step;
  }
  EXPECT_EQ(opt.step(), 5);
  // The part before the range is untouched.
  const std::vector<float> after = device_params.ToHost();
  EXPECT_TRUE(std::equal(after.begin(), after.begin() + begin, params.begin()));
}

config::ScheduleConfig Schedule(config::ScheduleConfig::Kind kind, int64_t warmup, double floor = 0.0,
                                double decay_fraction = 0.0) {
  config::ScheduleConfig s;
  s.set_kind(kind);
  s.set_warmup_steps(warmup);
  s.set_min_lr_ratio(floor);
  s.set_decay_fraction(decay_fraction);
  return s;
}

TEST(LrScheduleTest, WarmupThenConstantIsThePapers) {
  const auto s = Schedule(config::ScheduleConfig::WARMUP_CONSTANT, 4);
  EXPECT_DOUBLE_EQ(LearningRate(s, 0.0625, 0, 100), 0.0625 / 4);
  EXPECT_DOUBLE_EQ(LearningRate(s, 0.0625, 3, 100), 0.0625);
  EXPECT_DOUBLE_EQ(LearningRate(s, 0.0625, 99, 100), 0.0625);
}

TEST(LrScheduleTest, CosineFallsToTheFloorAtTheEnd) {
  const auto s = Schedule(config::ScheduleConfig::WARMUP_COSINE, 10, 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(s, 1.0, 10, 110), 1.0);
  EXPECT_NEAR(LearningRate(s, 1.0, 60, 110), 0.55, 1e-12);
  EXPECT_NEAR(LearningRate(s, 1.0, 110, 110), 0.1, 1e-12);
}

TEST(LrScheduleTest, WarmupStableDecayDecaysOnlyInTheLastFraction) {
  const auto s = Schedule(config::ScheduleConfig::WARMUP_STABLE_DECAY, 5, 0.0, 0.2);
  EXPECT_DOUBLE_EQ(LearningRate(s, 2.0, 79, 100), 2.0);
  EXPECT_NEAR(LearningRate(s, 2.0, 80, 100), 2.0 * (1 - 1.0 / 20), 1e-12);
  EXPECT_NEAR(LearningRate(s, 2.0, 99, 100), 0.0, 1e-12);
}

TEST(LossScalerTest, OverflowSkipsTheStepAndBacksOffThenGrows) {
  DynamicLossScaler scaler(true, 1024.0, /*growth_interval=*/3);
  EXPECT_FALSE(scaler.Update(false));
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_EQ(scaler.state().skipped, 1);
  EXPECT_TRUE(scaler.Update(true));
  EXPECT_TRUE(scaler.Update(true));
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_TRUE(scaler.Update(true));
  EXPECT_EQ(scaler.scale(), 1024.0);
}

TEST(LossScalerTest, DisabledScalerIsOneAndOnlySkipsNonFiniteSteps) {
  DynamicLossScaler scaler(false);
  EXPECT_EQ(scaler.scale(), 1.0);
  EXPECT_TRUE(scaler.Update(true));
  EXPECT_FALSE(scaler.Update(false));
  EXPECT_EQ(scaler.scale(), 1.0);
}

}  // namespace
}  // namespace multiscreen
