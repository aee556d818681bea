// Issue 42: a step readies its gradients with ModelStage::ZeroGradientsBeforeStep instead
// of a Fill of the whole buffer. Multiscreen zeroes only s_E, s_F and the tiles' scalars
// and has its first backward write W_O, W_Q, W_K, W_V, W_G (β = 0, a copy instead of an
// add) and its first EndStep write W_E. Every gradient must come out bit for bit as the
// adding step from zeros gives it, from a buffer full of NaN (what a skipped fp16 step
// leaves: no overwriting path may read what it overwrites), for every shard shape a
// layout has (whole model, a tp shard, first, middle and last pipeline stages), one and
// two micro-batches, on the CPU and on the CUDA device (the emulated one in the emulated
// build; the device cases skip, visibly, where none is visible).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/buffer.h"
#include "kernels/device_array.h"
#include "model/model_stage.h"
#include "parallel/pipeline.h"
#include "parallel/process_grid.h"
#include "parallel/step.h"
#include "tests/model/test_model.h"

namespace multiscreen {
namespace {

using testing::PerturbedParams;
using testing::RandomTokens;
using testing::TinyDims;

constexpr int64_t kB = 2, kT = 11;

struct Case {
  Device device;
  Precision precision;
};
std::string CaseName(const Case& c) {
  return DeviceName(c.device) + (c.precision == Precision::kBf16 ? "_bf16" : "_fp32");
}
void PrintTo(const Case& c, std::ostream* os) { *os << CaseName(c); }

bool SkipWithoutDevice(Device device) {
  if (device == Device::kCpu || CudaAvailable()) return false;
  std::fprintf(stderr, "\n*** SKIPPED: no CUDA device visible; the device case is NOT tested here ***\n\n");
  return true;
}

std::vector<float> Random(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

// The pieces a pipeline stage of `shard` runs over M micro-batches on one instance (Run
// with one slot): BeginStep; per micro-batch Embed (or a random x), LayersForward,
// HeadLoss (or a random ∂x), LayersBackward, EmbedBackward; EndStep; grad_scale 1/M.
// `ready`: grads start as NaN and ZeroGradientsBeforeStep readies them; otherwise they
// start as zeros and every piece adds (the step before issue 42). Host copy of grads.
std::vector<float> StageGrads(const Case& c, const ModelDims& dims, const ShardSpec& shard, int64_t M, bool ready) {
  ModelOptions options;
  options.device = c.device;
  options.precision = c.precision;
  auto model = MakeModelStage<float>(dims, shard, options);
  const ParamLayout& layout = model->layout();
  const int64_t n = layout.size(), rows = kB * kT;
  DeviceArray<float> params(c.device), grads(c.device), x(c.device), dx(c.device);
  params.Resize(n);
  params.CopyFromHost(PerturbedParams<float>(layout, 5).data());
  grads.Resize(n);
  grads.CopyFromHost(std::vector<float>(n, ready ? std::numeric_limits<float>::quiet_NaN() : 0.f).data());
  x.Resize(rows * dims.d_e);
  dx.Resize(rows * dims.d_e);
  const auto tokens = RandomTokens(dims.vocab, M * kB * (kT + 1), 6);
  std::vector<int32_t> inputs, targets;
  model->BeginStep(params.data());
  if (ready) model->ZeroGradientsBeforeStep(grads.data());
  for (int64_t m = 0; m < M; ++m) {
    SplitWindows(tokens.data() + m * kB * (kT + 1), kB, kT, &inputs, &targets);
    if (shard.embed) {
      model->Embed(params.data(), inputs.data(), rows, x.data());
    } else {
      x.CopyFromHost(Random(rows * dims.d_e, 10 + m).data());
    }
    model->LayersForward(params.data(), kB, kT, x.data());
    if (shard.head) {
      model->HeadLoss(params.data(), x.data(), targets.data(), rows, dx.data(), grads.data(), 1.0 / M, nullptr);
    } else {
      dx.CopyFromHost(Random(rows * dims.d_e, 20 + m).data());
    }
    model->LayersBackward(params.data(), dx.data(), grads.data());
    if (shard.embed) model->EmbedBackward(params.data(), inputs.data(), rows, dx.data(), grads.data());
  }
  model->EndStep(grads.data());
  return grads.ToHost();
}

// Every gradient the same bits; names the first entry that differs.
void ExpectSameBits(const ParamLayout& layout, const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const ParamEntry& e : layout.entries()) {
    for (int64_t i = e.buffer_offset; i < e.buffer_offset + e.size(); ++i) {
      if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
        ADD_FAILURE() << e.name << "[" << i - e.buffer_offset << "]: " << got[i] << " after ZeroGradientsBeforeStep, "
                      << want[i] << " after a fill";
        break;
      }
    }
  }
}

class ZeroGradientsTest : public ::testing::TestWithParam<Case> {};

TEST_P(ZeroGradientsTest, EveryShardShapeGivesTheFilledStepsBitsFromNaN) {
  if (SkipWithoutDevice(GetParam().device)) GTEST_SKIP() << "no CUDA device visible";
  ModelDims dims = TinyDims("tiny_psi4");
  ASSERT_GE(dims.n_layers, 3);  // a middle stage
  ModelDims no_gate = dims;
  no_gate.output_gate = false;  // 7 tensors a layer: the scalars' stride differs
  const struct {
    const char* name;
    ModelDims dims;
    ShardSpec shard;
  } shards[] = {
      {"whole model", dims, ShardSpec::Full(dims)},
      {"whole model without W_G", no_gate, ShardSpec::Full(no_gate)},
      {"tp rank 1 of 2", dims, ShardSpec::ForRank(dims, 2, 1, 1, 0)},
      {"first of 3 stages", dims, ShardSpec::ForRank(dims, 1, 3, 0, 0)},
      {"middle of 3 stages", dims, ShardSpec::ForRank(dims, 1, 3, 0, 1)},
      {"last of 3 stages, tp rank 0 of 2", dims, ShardSpec::ForRank(dims, 2, 3, 0, 2)},
  };
  for (const auto& s : shards) {
    for (int64_t M : {1, 2}) {
      SCOPED_TRACE(std::string(s.name) + ", " + std::to_string(M) + " micro-batches");
      const ParamLayout layout(s.dims, s.shard);
      ExpectSameBits(layout, StageGrads(GetParam(), s.dims, s.shard, M, true),
                     StageGrads(GetParam(), s.dims, s.shard, M, false));
    }
  }
}

// PipelineStage::Run (which readies the gradients itself) from NaN: the adding pieces' bits.
TEST_P(ZeroGradientsTest, PipelineStageRunFromNaNGivesTheFilledStepsBits) {
  if (SkipWithoutDevice(GetParam().device)) GTEST_SKIP() << "no CUDA device visible";
  const ModelDims dims = TinyDims("tiny_psi4");
  const ShardSpec shard = ShardSpec::Full(dims);
  const ParamLayout layout(dims, shard);
  ModelOptions options;
  options.device = GetParam().device;
  options.precision = GetParam().precision;
  for (int64_t M : {1, 2}) {
    SCOPED_TRACE(std::to_string(M) + " micro-batches");
    PipelineStage stage(dims, shard, options, nullptr, nullptr);
    DeviceArray<float> params(options.device), grads(options.device);
    params.Resize(layout.size());
    params.CopyFromHost(PerturbedParams<float>(layout, 5).data());
    grads.Resize(layout.size());
    grads.CopyFromHost(std::vector<float>(layout.size(), std::numeric_limits<float>::quiet_NaN()).data());
    const auto tokens = RandomTokens(dims.vocab, M * kB * (kT + 1), 6);
    for (int run = 0; run < 2; ++run) {  // the second run overwrites the first's gradients too
      auto loss = stage.Run(params.data(), tokens.data(), M, kB, kT, grads.data(), 1.0 / M);
      ASSERT_TRUE(loss.ok()) << loss.status();
      ExpectSameBits(layout, grads.ToHost(), StageGrads(GetParam(), dims, shard, M, false));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, ZeroGradientsTest,
                         ::testing::Values(Case{Device::kCpu, Precision::kFp32}, Case{Device::kCpu, Precision::kBf16},
                                           Case{Device::kCuda, Precision::kFp32},
                                           Case{Device::kCuda, Precision::kBf16}),
                         [](const ::testing::TestParamInfo<Case>& info) { return CaseName(info.param); });

// The trainer's entry point (parallel/step.cc, which no longer fills) on one process.
TEST(ZeroGradientsStepTest, ComputeGradientsFromNaNGivesTheFilledStepsBits) {
  const ModelDims dims = TinyDims("tiny_psi4");
  auto grid = ProcessGrid::Single();
  auto model = ParallelModel::Create(*grid, dims);
  ASSERT_TRUE(model.ok()) << model.status();
  const ParamLayout& layout = (*model)->layout();
  const std::vector<float> params = PerturbedParams<float>(layout, 5);
  const int64_t M = 2;
  const auto tokens = RandomTokens(dims.vocab, M * kB * (kT + 1), 6);
  std::vector<float> grads(layout.size(), std::numeric_limits<float>::quiet_NaN());
  auto loss = ComputeGradients(*grid, **model, params.data(), tokens.data(), StepShape{M, kB, kT}, grads.data());
  ASSERT_TRUE(loss.ok()) << loss.status();
  ExpectSameBits(layout, grads, StageGrads({Device::kCpu, Precision::kFp32}, dims, ShardSpec::Full(dims), M, false));
}

}  // namespace
}  // namespace multiscreen
