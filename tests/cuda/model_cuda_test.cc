// The model on the GPU against the model on the CPU: the same orchestration
// (model/multiscreen.h, model/transformer.h) over the CUDA kernel tables and over the
// CPU ones, so what differs is only the kernels. Loss and every parameter's gradient of
// ForwardBackward in fp32 within 1e-5 relative (‖Δ‖/‖ref‖), bf16 (and the Transformer's
// fp16) within 1e-2; Multiscreen's inference logits with expanded windows; and a
// pipeline stage whose parameters and gradients are device arrays (as the trainer
// keeps them) equal to the CPU stage. The tiled screening kernels against the simple
// ones in the model (loss and every gradient), and what selects them; the tiled attention
// against the simple one in the Transformer. Skips, visibly, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#ifdef MULTISCREEN_CUDA_EMULATED
#include "cuda_emulator/emulator.h"
#endif
#include "kernels/cuda/cuda_kernel_table.h"
#include "kernels/device_array.h"
#include "kernels/host_staging.h"
#include "model/model_stage.h"
#include "model/multiscreen.h"
#include "parallel/pipeline.h"
#include "tests/cuda/cuda_test.h"
#include "tests/model/test_model.h"
#include "trainer/flops.h"

namespace multiscreen {
namespace {

using testing::PerturbedParams;
using testing::WellConditionedParams;
using testing::RandomTokens;
using testing::TinyDims;

// ‖a − b‖ / ‖b‖ over [offset, offset + n).
double RelativeError(const std::vector<float>& a, const std::vector<float>& b, int64_t offset, int64_t n) {
  double diff = 0, ref = 0;
  for (int64_t i = offset; i < offset + n; ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    ref += double(b[i]) * b[i];
  }
  return ref > 0 ? std::sqrt(diff / ref) : std::sqrt(diff);
}

struct Result {
  double loss = 0;
  std::vector<float> grads, token_losses;
};

Result RunModel(Device device, const ModelDims& dims, Precision precision, const std::vector<float>& params,
           const std::vector<int32_t>& tokens, int64_t B, int64_t T,
           ScreeningKernel screening = ScreeningKernel::kAuto, bool screening_u_operand = true,
           bool gradient_operand = true) {
  ModelOptions options;
  options.device = device;
  options.precision = precision;
  options.screening_kernel = screening;
  options.screening_u_operand = screening_u_operand;
  options.screening_gradient_operand = gradient_operand;
  auto model = MakeModelStage<float>(dims, ShardSpec::Full(dims), options);  // either family
  const int64_t n = model->layout().size();
  auto staging = HostStaging<float>::Create(device);
  EXPECT_TRUE(staging.ok()) << staging.status();
  Result r;
  r.grads.assign(n, 0.f);
  r.token_losses.resize(B * T);
  r.loss = model->ForwardBackward(staging->In(params.data(), n), tokens.data(), B, T,
                                  staging->GradientsFor(r.grads.data(), n), r.token_losses.data());
  staging->AddOut(r.grads.data());
  return r;
}

// A pipeline stage (parallel/pipeline.h) of the whole model over 3 micro-batches, its
// parameters and gradients arrays of the stage's device, on the GPU and on the CPU.
void ExpectStagesMatch(const ModelDims& dims, const std::vector<float>& params, uint64_t token_seed) {
  const ShardSpec shard = ShardSpec::Full(dims);
  const ParamLayout layout(dims, shard);
  const int64_t M = 3, B = 2, T = 29;
  const auto tokens = RandomTokens(dims.vocab, M * B * (T + 1), token_seed);
  std::vector<float> grads[2];
  double loss[2];
  for (Device device : {Device::kCpu, Device::kCuda}) {
    ModelOptions options;
    options.device = device;
    PipelineStage stage(dims, shard, options, nullptr, nullptr);
    DeviceArray<float> p(device), g(device);
    p.Resize(layout.size());
    p.CopyFromHost(params.data());
    g.Resize(layout.size());
    const std::vector<float> start(layout.size(), 0.5f);  // Run writes: what is there is not read
    g.CopyFromHost(start.data());
    auto l = stage.Run(p.data(), tokens.data(), M, B, T, g.data(), 1.0 / M);
    ASSERT_TRUE(l.ok()) << l.status();
    loss[device == Device::kCuda] = *l;
    grads[device == Device::kCuda] = g.ToHost();
  }
  EXPECT_NEAR(loss[1], loss[0], 1e-5 * std::abs(loss[0]));
  EXPECT_LE(RelativeError(grads[1], grads[0], 0, layout.size()), 1e-5);
}

class ModelCudaTest : public CudaTest, public ::testing::WithParamInterface<const char*> {};

// The gradients of the model in fp64 on the CPU: the truth that the fp32 and bf16 runs
// approximate.
std::vector<double> Fp64Grads(const ModelDims& dims, const std::vector<float>& params,
                              const std::vector<int32_t>& tokens, int64_t B, int64_t T) {
  auto model = MakeModelStage<double>(dims, ShardSpec::Full(dims), ModelOptions{});
  const std::vector<double> p(params.begin(), params.end());
  std::vector<double> grads(p.size(), 0.0), token_losses(B * T);
  model->ForwardBackward(p.data(), tokens.data(), B, T, grads.data(), token_losses.data());
  return grads;
}

// GPU against CPU, every tensor within `tol` relative. ∂L/∂s_E is the exception: a
// small difference of large terms (even with WellConditionedParams), which rounding
// moves by far more than `tol` in any summation order (measured: 1e-4 to 1e-3 relative
// between the two fp32 implementations at Ψ = 2 and 4). It is held against the fp64
// truth instead: the GPU within 1e-3 of it relative (tol where that is looser; 1e-3 as
// in parallel_step_test; `s_e_tol` where that is looser still), or no farther than 4× the
// CPU's own distance.
void ExpectClose(const ModelDims& dims, const Result& gpu, const Result& cpu, double tol,
                 const std::vector<double>& truth, double s_e_tol = 0) {
  EXPECT_NEAR(gpu.loss, cpu.loss, tol * std::abs(cpu.loss));
  const int64_t n = static_cast<int64_t>(cpu.grads.size());
  EXPECT_LE(RelativeError(gpu.grads, cpu.grads, 0, n), tol);
  EXPECT_LE(RelativeError(gpu.token_losses, cpu.token_losses, 0, cpu.token_losses.size()), tol);
  const ParamLayout layout(dims, ShardSpec::Full(dims));
  for (const ParamEntry& e : layout.entries()) {
    if (e.kind == ParamKind::kS_E) {
      const double ref = truth[e.buffer_offset], g = gpu.grads[e.buffer_offset], c = cpu.grads[e.buffer_offset];
      EXPECT_LE(std::abs(g - ref), std::max(4 * std::abs(c - ref), std::max({1e-3, tol, s_e_tol}) * std::abs(ref)))
          << e.name << ": gpu " << g << ", cpu " << c << ", fp64 " << ref;
      continue;
    }
    EXPECT_LE(RelativeError(gpu.grads, cpu.grads, e.buffer_offset, e.size()), tol) << e.name;
  }
  for (float g : gpu.grads) ASSERT_TRUE(std::isfinite(g));
}

TEST_P(ModelCudaTest, ForwardBackwardMatchesTheCpuInFp32) {
  const ModelDims dims = TinyDims(GetParam());
  const ParamLayout layout(dims, ShardSpec::Full(dims));
  const auto params = WellConditionedParams<float>(layout, 11);  // s_E comparable
  const int64_t B = 2, T = 37;  // T not a multiple of any block
  const auto tokens = RandomTokens(dims.vocab, B * (T + 1), 5);
  ExpectClose(dims, RunModel(Device::kCuda, dims, Precision::kFp32, params, tokens, B, T),
              RunModel(Device::kCpu, dims, Precision::kFp32, params, tokens, B, T), 1e-5,
              Fp64Grads(dims, params, tokens, B, T));
}

TEST_P(ModelCudaTest, ForwardBackwardMatchesTheCpuInBf16) {
  const ModelDims dims = TinyDims(GetParam());
  const ParamLayout layout(dims, ShardSpec::Full(dims));
  const auto params = WellConditionedParams<float>(layout, 12);
  const int64_t B = 2, T = 45;
  const auto tokens = RandomTokens(dims.vocab, B * (T + 1), 6);
  // ∂L/∂s_E under bf16: its cancelling terms carry bf16's 2^-8 rounding, and the CPU and the
  // device round the head at different points (the CPU its softmax numerators and rescaled
  // y, the device c·(softmax − onehot); docs/performance.md, "The bf16 CPU step"), so the
  // two land at different distances from the truth: tiny_psi4, the device 34 % from fp64,
  // the CPU 4.6 % since its bf16 step rounds what the device rounds (8.6 % or more before,
  // which the 4× rule passed). Held within 50 % of the truth there (a sign or a lost term
  // is 100 % or more); every other tensor stays within 1e-2 of the CPU's.
  ExpectClose(dims, RunModel(Device::kCuda, dims, Precision::kBf16, params, tokens, B, T),
              RunModel(Device::kCpu, dims, Precision::kBf16, params, tokens, B, T), 1e-2,
              Fp64Grads(dims, params, tokens, B, T), /*s_e_tol=*/0.5);
}

TEST_P(ModelCudaTest, InferenceLogitsMatchTheCpu) {
  const ModelDims dims = TinyDims(GetParam());
  const ParamLayout layout(dims, ShardSpec::Full(dims));
  const auto params = PerturbedParams<float>(layout, 13);
  const int64_t T = 50;
  const auto ids = RandomTokens(dims.vocab, T, 7);
  InferenceOptions inference;
  inference.train_len = 8;  // windows past 8 expand to ∞
  std::vector<float> logits[2];
  for (Device device : {Device::kCpu, Device::kCuda}) {
    ModelOptions options;
    options.device = device;
    Multiscreen<float> model(dims, ShardSpec::Full(dims), options);
    auto staging = HostStaging<float>::Create(device);
    ASSERT_TRUE(staging.ok()) << staging.status();
    std::vector<float>& out = logits[device == Device::kCuda];
    out.resize(T * dims.vocab);
    model.Logits(staging->In(params.data(), layout.size()), ids.data(), T, inference, out.data());
  }
  EXPECT_LE(RelativeError(logits[1], logits[0], 0, logits[0].size()), 1e-5);
}

// A window that overflows (s_w = 1000: w = ∞, the plain causal mask) on the device: every
// gradient finite and the CPU's, and that window's ∂L/∂s_w its limit 0 (it was 0 · ∞ = NaN:
// the host maps the kernels' ∂L/∂w to ∂L/∂s_w for either device).
TEST_P(ModelCudaTest, AnOverflowingWindowGivesTheCpusFiniteGradients) {
  const ModelDims dims = TinyDims(GetParam());
  const ParamLayout layout(dims, ShardSpec::Full(dims));
  auto params = WellConditionedParams<float>(layout, 15);
  for (const ParamEntry& e : layout.entries()) {
    if (e.kind == ParamKind::kS_w) params[e.buffer_offset] = 1000.f;  // tile 0 of every layer
  }
  const int64_t B = 2, T = 37;
  const auto tokens = RandomTokens(dims.vocab, B * (T + 1), 9);
  const Result gpu = RunModel(Device::kCuda, dims, Precision::kFp32, params, tokens, B, T);
  for (const ParamEntry& e : layout.entries()) {
    if (e.kind == ParamKind::kS_w) EXPECT_EQ(gpu.grads[e.buffer_offset], 0.f) << e.name;
  }
  ExpectClose(dims, gpu, RunModel(Device::kCpu, dims, Precision::kFp32, params, tokens, B, T), 1e-5,
              Fp64Grads(dims, params, tokens, B, T));
}

TEST_P(ModelCudaTest, AStageOnDeviceArraysMatchesTheCpuStage) {
  const ModelDims dims = TinyDims(GetParam());
  ExpectStagesMatch(dims, PerturbedParams<float>(ParamLayout(dims, ShardSpec::Full(dims)), 14), 8);
}

// tiny_psi2: the CPU head's whole-row path; tiny_psi4: its panel path.
INSTANTIATE_TEST_SUITE_P(Tiny, ModelCudaTest, ::testing::Values("tiny_psi2", "tiny_psi4"));

#ifdef MULTISCREEN_CUDA_EMULATED
// What a training step ran on the emulated device (cuda_emulator/emulator.h's tally):
// kernel launches and cuBLAS products, copies, and the GEMMs' 16-bit packing kernel's
// launches and threads (one thread per element converted, up to a block's 256).
struct StepWork {
  uint64_t launches = 0, copies = 0, pack_launches = 0, packed = 0;
};

StepWork StepTally() {
  StepWork w;
  for (const auto& [name, tally] : msemu::WorkTallies()) {
    if (tally.kind == msemu::WorkKind::kCopy) w.copies += tally.calls;
    if (tally.kind == msemu::WorkKind::kKernel || tally.kind == msemu::WorkKind::kLibrary) w.launches += tally.calls;
    if (name.find("PackKernel") != std::string::npos) {
      w.pack_launches += tally.calls;
      w.packed += tally.threads;
    }
  }
  return w;
}

// The work of the second of two training steps of M micro-batches of B × T tokens (a
// one-stage pipeline on the device, as the trainer runs it; the first step makes the
// GEMM plans and grows the buffers).
StepWork WorkOfAStep(const ModelDims& dims, Precision precision, int64_t M, int64_t B, int64_t T) {
  const ShardSpec shard = ShardSpec::Full(dims);
  const ParamLayout layout(dims, shard);
  const auto params = dims.transformer() ? testing::PerturbedTransformerParams<float>(layout, 41)
                                         : PerturbedParams<float>(layout, 41);
  const auto tokens = RandomTokens(dims.vocab, M * B * (T + 1), 42);
  ModelOptions options;
  options.device = Device::kCuda;
  options.precision = precision;
  PipelineStage stage(dims, shard, options, nullptr, nullptr);
  DeviceArray<float> p(Device::kCuda), g(Device::kCuda);
  p.Resize(layout.size());
  p.CopyFromHost(params.data());
  g.Resize(layout.size());
  EXPECT_TRUE(stage.Run(p.data(), tokens.data(), M, B, T, g.data(), 1.0 / M).ok());
  const StepWork before = StepTally();
  EXPECT_TRUE(stage.Run(p.data(), tokens.data(), M, B, T, g.data(), 1.0 / M).ok());
  const StepWork after = StepTally();
  return {after.launches - before.launches, after.copies - before.copies,
          after.pack_launches - before.pack_launches, after.packed - before.packed};
}

// Under bf16 a training step converts each weight matrix once (BeginStep packs W_cat,
// W_O, Ē; the Transformer's W_QKV, W_O, [W_gate; W_up], W_down and its table) and each
// activation and gradient that a layer's GEMMs read once per micro-batch, however many
// GEMMs read it (the forward's product and the backward's weight gradient; the
// backward's ∂X = ∂Y·Wᵀ and ∂W = Xᵀ∂Y), and the head's input. Counted
// exactly, each padded to the packing launch's blocks of 256 as the tally counts
// threads: converting a weight again in any micro-batch, or an activation per GEMM,
// changes the count.
TEST_F(CudaTest, Bf16TrainingStepConvertsEachWeightOnceAndActivationsPerMicroBatch) {
  auto padded = [](int64_t n) { return uint64_t((n + 255) / 256 * 256); };
  const int64_t M = 3, B = 2, T = 13, R = B * T;
  for (const char* name : {"tiny_psi4", "tiny_transformer"}) {
    const ModelDims dims = *LoadModel(name);
    const int64_t L = dims.n_layers, dE = dims.d_e, V = dims.vocab;
    uint64_t weights = padded(V * dE), activations = 0;  // the tied head's Ē
    // The head: y, once for its three products (logits y·Ēᵀ, ∂y = ∂z·Ē, ∂Ē += ∂zᵀ·y); its
    // row pass writes ∂z in 16 bits itself.
    activations += padded(R * dE);
    if (dims.transformer()) {
      const int64_t dl = dims.n_heads * dims.d_k, F = dims.d_ff();
      weights += L * (padded(dE * 3 * dl) + padded(dl * dE) + padded(2 * F * dE) + padded(F * dE));
      // Forward: a = RMSNorm(x), o, f = RMSNorm(x), h. Backward: ∂out (FFN), ∂[gate|up],
      // ∂out (attention), ∂qkv.
      activations += L * (padded(R * dE) + padded(R * dl) + padded(R * dE) + padded(R * F) + padded(R * dE) +
                          padded(R * 2 * F) + padded(R * dE) + padded(R * 3 * dl));
    } else {
      const int64_t nt = dims.n_heads, dV = dims.d_v, C = 2 * dims.d_k + (dims.output_gate ? 2 : 1) * dV;
      weights += L * (padded(dE * nt * C) + padded(nt * dV * dE));
      // Forward: x, U. Backward: ∂Δ, ∂P.
      activations += L * (padded(R * dE) + padded(R * nt * dV) + padded(R * dE) + padded(R * nt * C));
    }
    const StepWork fp32 = WorkOfAStep(dims, Precision::kFp32, M, B, T);
    const StepWork bf16 = WorkOfAStep(dims, Precision::kBf16, M, B, T);
    std::printf("%s, a step of %lld micro-batches: launches %llu (fp32) and %llu (bf16), copies %llu and %llu; "
                "bf16 packs %llu times, %llu elements (bound: weights %llu once + %lld x activations %llu)\n",
                name, static_cast<long long>(M), static_cast<unsigned long long>(fp32.launches),
                static_cast<unsigned long long>(bf16.launches), static_cast<unsigned long long>(fp32.copies),
                static_cast<unsigned long long>(bf16.copies), static_cast<unsigned long long>(bf16.pack_launches),
                static_cast<unsigned long long>(bf16.packed), static_cast<unsigned long long>(weights),
                static_cast<long long>(M), static_cast<unsigned long long>(activations));
    EXPECT_EQ(fp32.packed, 0u) << name;
    EXPECT_EQ(bf16.packed, weights + M * activations) << name;
  }
}

// The MFU denominator on a device (trainer/flops.h) times products alone: each size's two
// operands are packed once, however many products it times (a Gemm per product would
// convert both every time: on a GPU a large part of a bf16 product's time).
TEST_F(CudaTest, MeasuredGemmRateConvertsEachSizesOperandsOnce) {
  auto table = MakeKernelTable<float>(Device::kCuda);
  ASSERT_TRUE(table.ok()) << table.status();
  const StepWork before = StepTally();
  int64_t best_n = 0;
  EXPECT_GT(MeasureGemmGflops(**table, Precision::kBf16, 256, 0.02, &best_n), 0);
  const StepWork after = StepTally();
  EXPECT_EQ(best_n, 256);
  EXPECT_EQ(after.pack_launches - before.pack_launches, 2u);
  EXPECT_EQ(after.packed - before.packed, 2u * 256 * 256);
}
#endif  // MULTISCREEN_CUDA_EMULATED

// The tiled screening kernels (kernels/cuda/screening_tiled.h) in the model: tiny_tiled
// has their widths (d_K = 16, d_V = 64); T = 70 is two 64-query blocks, the second
// ragged; the four tiles' windows are set to w = 2.5, 17 (MiPE-rotated, w_th = 32), 50
// (< T) and 200 (≥ T).
class TiledScreeningModelTest : public CudaTest {
 protected:
  static constexpr int64_t kB = 2, kT = 70;
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    unsetenv("MULTISCREEN_SCREENING_KERNEL");  // kAuto means the precision's choice here
    dims_ = TinyDims("tiny_tiled");
    const ParamLayout layout(dims_, ShardSpec::Full(dims_));
    params_ = WellConditionedParams<float>(layout, 21);
    const double windows[] = {2.5, 17, 50, 200};
    for (const ParamEntry& e : layout.entries()) {
      if (e.kind != ParamKind::kS_w) continue;
      for (int64_t i = 0; i < e.size(); ++i) params_[e.buffer_offset + i] = float(std::log(windows[i % 4] - 1));
    }
    tokens_ = RandomTokens(dims_.vocab, kB * (kT + 1), 22);
  }
  Result Run(Precision precision, ScreeningKernel screening, bool screening_u_operand = true,
             bool gradient_operand = true) const {
    return RunModel(Device::kCuda, dims_, precision, params_, tokens_, kB, kT, screening, screening_u_operand,
                    gradient_operand);
  }
  ModelDims dims_;
  std::vector<float> params_;
  std::vector<int32_t> tokens_;
};

// The loss, every token's loss and every parameter's gradient on the tiled kernels
// within 1e-2 relative (per tensor) of the simple kernels' (the bf16 bound), in
// the bf16 step (both with bf16 GEMMs) and in the fp32 step (the kernels alone differ).
// Measured worst: W_G, W_O, W_V, s_O 3.9e-3 (bf16) and 2.4e-3 (fp32), token losses 5.8e-5,
// the loss 4.9e-6. ∂L/∂s_E is the exception, as in ExpectClose and by its rule: a small
// difference of large terms (−1.1e-5 here), which the bf16 GEMMs alone move 60 % from
// the fp64 truth (tiled against simple in the bf16 step: 2.1e-1); the tiled run is held
// to within 4× the simple run's distance from that truth, or 2e-2 of it (fp32 step:
// 4.4e-3 measured; 1.4e-2 with a 61-token vocabulary).
TEST_F(TiledScreeningModelTest, LossAndEveryGradientMatchTheSimpleKernels) {
  const auto truth = Fp64Grads(dims_, params_, tokens_, kB, kT);
  const ParamLayout layout(dims_, ShardSpec::Full(dims_));
  for (Precision precision : {Precision::kBf16, Precision::kFp32}) {
    SCOPED_TRACE(::testing::Message() << "precision " << int(precision));
    const Result tiled = Run(precision, ScreeningKernel::kTiled);
    const Result simple = Run(precision, ScreeningKernel::kSimple);
    EXPECT_NEAR(tiled.loss, simple.loss, 1e-2 * std::abs(simple.loss));
    EXPECT_LE(RelativeError(tiled.token_losses, simple.token_losses, 0, kB * kT), 1e-2);
    for (const ParamEntry& e : layout.entries()) {
      if (e.kind == ParamKind::kS_E) {
        const double ref = truth[e.buffer_offset], t = tiled.grads[e.buffer_offset], c = simple.grads[e.buffer_offset];
        EXPECT_LE(std::abs(t - ref), std::max(4 * std::abs(c - ref), 2e-2 * std::abs(ref)))
            << e.name << ": tiled " << t << ", simple " << c << ", fp64 " << ref;
        continue;
      }
      EXPECT_LE(RelativeError(tiled.grads, simple.grads, e.buffer_offset, e.size()), 1e-2) << e.name;
    }
    for (float g : tiled.grads) ASSERT_TRUE(std::isfinite(g));
    // The tiled kernels ran: their bf16 α·v̄ differs from the simple kernels' fp32.
    EXPECT_NE(tiled.loss, simple.loss);
  }
}

// Issue 42: under bf16 the tiled query and key passes write ∂L/∂P straight as the projections'
// bf16 GEMM operand (KernelTable::ScreeningBackwardToOperand), each value rounded once to
// nearest even as they store it, where they wrote fp32 ∂L/∂P for PackAsGemm's pack pass
// (ModelOptions::screening_gradient_operand off): the same operand bits, so the loss, every
// token's loss and every parameter's gradient of the step are the same bits. On the emulated
// device the direct form also runs one pack launch fewer per layer, and packs
// B·T·tiles·p_cols() elements fewer per layer (the tally: one thread per element).
TEST_F(TiledScreeningModelTest, Bf16GradientOperandIsTheFp32GradientPackedBitForBit) {
#ifdef MULTISCREEN_CUDA_EMULATED
  const StepWork start = StepTally();
#endif
  const Result direct = Run(Precision::kBf16, ScreeningKernel::kTiled);
#ifdef MULTISCREEN_CUDA_EMULATED
  const StepWork middle = StepTally();
#endif
  const Result packed =
      Run(Precision::kBf16, ScreeningKernel::kTiled, /*screening_u_operand=*/true, /*gradient_operand=*/false);
#ifdef MULTISCREEN_CUDA_EMULATED
  const StepWork end = StepTally();
  const int64_t L = dims_.n_layers, C = 2 * dims_.d_k + 2 * dims_.d_v, rows = kB * kT * dims_.n_heads;
  EXPECT_EQ((end.pack_launches - middle.pack_launches) - (middle.pack_launches - start.pack_launches), uint64_t(L));
  EXPECT_EQ((end.packed - middle.packed) - (middle.packed - start.packed),
            uint64_t(L * ((rows * C + 255) / 256 * 256)));
#endif
  EXPECT_EQ(direct.loss, packed.loss);
  EXPECT_EQ(direct.token_losses, packed.token_losses);
  const ParamLayout layout(dims_, ShardSpec::Full(dims_));
  for (const ParamEntry& e : layout.entries()) {
    int64_t differ = 0, nonzero = 0;
    for (int64_t i = e.buffer_offset; i < e.buffer_offset + e.size(); ++i) {
      differ += std::memcmp(&direct.grads[i], &packed.grads[i], sizeof(float)) != 0;
      nonzero += packed.grads[i] != 0.f;
    }
    EXPECT_EQ(differ, 0) << e.name << ": " << differ << " of " << e.size() << " elements differ";
    EXPECT_GT(nonzero, 0) << e.name << ": an all-zero gradient proves little";
  }
}

// What selects the kernels: auto is the tiled kernels under bf16 and the simple ones
// under fp32 and fp16, bit for bit.
TEST_F(TiledScreeningModelTest, AutoRunsTiledUnderBf16AndSimpleOtherwise) {
  const Result auto_bf16 = Run(Precision::kBf16, ScreeningKernel::kAuto);
  EXPECT_EQ(auto_bf16.grads, Run(Precision::kBf16, ScreeningKernel::kTiled).grads);
  EXPECT_NE(auto_bf16.grads, Run(Precision::kBf16, ScreeningKernel::kSimple).grads);
  for (Precision precision : {Precision::kFp32, Precision::kFp16}) {
    SCOPED_TRACE(::testing::Message() << "precision " << int(precision));
    const Result auto_other = Run(precision, ScreeningKernel::kAuto);
    EXPECT_EQ(auto_other.grads, Run(precision, ScreeningKernel::kSimple).grads);
    EXPECT_NE(auto_other.grads, Run(precision, ScreeningKernel::kTiled).grads);
  }
}

// Issue 42: under bf16 the tiled forward writes U as W_O's bf16 GEMM operand itself
// (KernelTable::ScreeningForwardOperand); the step is bit for bit the one that wrote fp32 U
// and packed it (screening_u_operand = false): the loss, every token's loss and every
// parameter's gradient (W_O's through Uᵀ·∂x, the rest through U·W_O's forward).
TEST_F(TiledScreeningModelTest, Bf16UOperandStepIsTheFp32UStepBitForBit) {
  const Result fused = Run(Precision::kBf16, ScreeningKernel::kTiled);
  const Result packed = Run(Precision::kBf16, ScreeningKernel::kTiled, /*screening_u_operand=*/false);
  EXPECT_EQ(std::memcmp(&fused.loss, &packed.loss, sizeof(double)), 0) << fused.loss << " vs " << packed.loss;
  ASSERT_EQ(fused.token_losses.size(), packed.token_losses.size());
  ASSERT_EQ(fused.grads.size(), packed.grads.size());
  int64_t differ = 0, nonzero = 0;
  for (size_t i = 0; i < fused.token_losses.size(); ++i) {
    differ += std::memcmp(&fused.token_losses[i], &packed.token_losses[i], sizeof(float)) != 0;
  }
  EXPECT_EQ(differ, 0) << "token losses differ";
  const ParamLayout layout(dims_, ShardSpec::Full(dims_));
  for (const ParamEntry& e : layout.entries()) {
    differ = 0;
    for (int64_t i = e.buffer_offset; i < e.buffer_offset + e.size(); ++i) {
      differ += std::memcmp(&fused.grads[i], &packed.grads[i], sizeof(float)) != 0;
      nonzero += packed.grads[i] != 0.f;
    }
    EXPECT_EQ(differ, 0) << e.name << ": elements of the gradient differ";
  }
  EXPECT_GT(nonzero, int64_t(packed.grads.size() / 2)) << "gradients mostly zero prove little";
  for (float g : fused.grads) ASSERT_TRUE(std::isfinite(g));
}

// MULTISCREEN_SCREENING_KERNEL overrides auto (and only auto); another value is refused.
TEST(TiledScreeningSelection, TheEnvironmentVariableOverridesAuto) {
  KernelOptions bf16;
  bf16.precision = Precision::kBf16;
  KernelOptions fp32;
  auto tiled = [](const KernelOptions& o) { return *kernels::cuda::TiledScreening(o); };
  unsetenv("MULTISCREEN_SCREENING_KERNEL");
  EXPECT_TRUE(tiled(bf16));
  EXPECT_FALSE(tiled(fp32));
  setenv("MULTISCREEN_SCREENING_KERNEL", "simple", 1);
  EXPECT_FALSE(tiled(bf16));
  setenv("MULTISCREEN_SCREENING_KERNEL", "Tiled", 1);
  EXPECT_TRUE(tiled(fp32));
  KernelOptions pinned = fp32;
  pinned.screening_kernel = ScreeningKernel::kSimple;
  EXPECT_FALSE(tiled(pinned));
  setenv("MULTISCREEN_SCREENING_KERNEL", "fast", 1);
  const auto bad = kernels::cuda::TiledScreening(bf16);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "MULTISCREEN_SCREENING_KERNEL=fast: expected auto, simple or tiled");
  unsetenv("MULTISCREEN_SCREENING_KERNEL");
}

// The tiled softmax attention (kernels/cuda/attention_tiled.h) in the Transformer: the
// tiny Transformers widened to d_E = 128 over N_H = 2 heads, d_h = 64 (the tiled kernel's
// width), plain and with every switch on (QKNorm: the learned scale's gradient is the
// kernel's d_scale; SIO, PLNorm); parameters moved off the init (attention far from
// uniform); B = 2, T = 70 (two 64-query blocks, the second ragged). The model passes no
// kernel choice to the Transformer kernels, so the environment variable picks them here.
class TiledAttentionModelTest : public CudaTest, public ::testing::WithParamInterface<const char*> {
 protected:
  static constexpr int64_t kB = 2, kT = 70;
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    dims_ = *LoadModel(GetParam());
    ASSERT_EQ(dims_.n_heads, 2);
    dims_.d_e = 128;
    dims_.d_k = dims_.d_v = 64;  // d_E / N_H, as ResolveModel sets them
    params_ = testing::PerturbedTransformerParams<float>(ParamLayout(dims_, ShardSpec::Full(dims_)), 31);
    tokens_ = RandomTokens(dims_.vocab, kB * (kT + 1), 32);
  }
  void TearDown() override { unsetenv("MULTISCREEN_ATTENTION_KERNEL"); }
  Result Run(Precision precision, const char* kernel) const {
    setenv("MULTISCREEN_ATTENTION_KERNEL", kernel, 1);
    return RunModel(Device::kCuda, dims_, precision, params_, tokens_, kB, kT);
  }
  ModelDims dims_;
  std::vector<float> params_;
  std::vector<int32_t> tokens_;
};

// The tiled kernel's step against the simple kernel's. fp32 step (the attention kernels
// alone differ): the loss within 1e-5 relative, token losses and every gradient within
// 1e-2 per tensor (measured worst: W_K 2.7e-3, the kernel's bf16 ds, p, q, k, ∂o in the
// gradient products). bf16 step: the bf16 GEMMs move every gradient 3 to 11 % from the
// fp64 truth, and the step rounds o to bf16 after the attention, so the kernels' 1e-5
// differences in o flip roundings; the tiled run must be as close to the truth as the
// simple run, per tensor within 1.1× its distance (measured worst ratio 1.015; the two
// runs 1.5e-2 apart, W_Q of layer 1), and the loss within 1e-3 relative and the token
// losses within 1e-2 of it. ∂L/∂s_E (SIO) as ExpectClose holds it: within 4× the simple
// run's distance from the truth, or 2e-2 of it.
TEST_P(TiledAttentionModelTest, LossAndEveryGradientMatchTheSimpleKernel) {
  const auto truth64 = Fp64Grads(dims_, params_, tokens_, kB, kT);
  const std::vector<float> truth(truth64.begin(), truth64.end());
  const ParamLayout layout(dims_, ShardSpec::Full(dims_));
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    SCOPED_TRACE(::testing::Message() << "precision " << int(precision));
    const bool bf16 = precision == Precision::kBf16;
    const Result tiled = Run(precision, "tiled"), simple = Run(precision, "simple");
    EXPECT_NEAR(tiled.loss, simple.loss, (bf16 ? 1e-3 : 1e-5) * std::abs(simple.loss));
    EXPECT_LE(RelativeError(tiled.token_losses, simple.token_losses, 0, kB * kT), 1e-2);
    double worst = 0;
    for (const ParamEntry& e : layout.entries()) {
      if (e.kind == ParamKind::kS_E) {
        const double ref = truth64[e.buffer_offset], t = tiled.grads[e.buffer_offset], c = simple.grads[e.buffer_offset];
        EXPECT_LE(std::abs(t - ref), std::max(4 * std::abs(c - ref), 2e-2 * std::abs(ref)))
            << e.name << ": tiled " << t << ", simple " << c << ", fp64 " << ref;
        continue;
      }
      const int64_t at = e.buffer_offset, n = e.size();
      if (bf16) {
        const double from_truth = RelativeError(tiled.grads, truth, at, n);
        const double simple_from_truth = RelativeError(simple.grads, truth, at, n);
        EXPECT_LE(from_truth, 1.1 * simple_from_truth) << e.name;
        worst = std::max(worst, from_truth / simple_from_truth);
      } else {
        EXPECT_LE(RelativeError(tiled.grads, simple.grads, at, n), 1e-2) << e.name;
        worst = std::max(worst, RelativeError(tiled.grads, simple.grads, at, n));
      }
    }
    std::fprintf(stderr, "%s, %s step: loss %.9g (simple %.9g), token losses %.3g apart, worst gradient %s %.3g\n",
                 GetParam(), bf16 ? "bf16" : "fp32", tiled.loss, simple.loss,
                 RelativeError(tiled.token_losses, simple.token_losses, 0, kB * kT),
                 bf16 ? "distance from the truth, over the simple run's:" : "error", worst);
    for (float g : tiled.grads) ASSERT_TRUE(std::isfinite(g));
    EXPECT_NE(tiled.loss, simple.loss);  // the tiled kernel ran: its bf16 products differ from fp32
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, TiledAttentionModelTest, ::testing::Values("tiny_transformer", "tiny_transformer_all"));

// The Transformer baseline (issue 18): plain, with every switch on (QKNorm, SIO, PLNorm),
// and with attention SCREENING (issue 30: the kernel table's screening kernels per head);
// its parameters moved off the init so that attention is far from uniform.
class TransformerCudaTest : public CudaTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(TransformerCudaTest, ForwardBackwardMatchesTheCpuInEveryPrecision) {
  const ModelDims dims = *LoadModel(GetParam());
  const ParamLayout layout(dims, ShardSpec::Full(dims));
  const auto params = testing::PerturbedTransformerParams<float>(layout, 15);
  struct Case {
    Precision precision;
    int64_t B, T;  // T = 37: below the CPU attention's 64-key block; 70: past it
    double tol;
  };
  for (const Case c : {Case{Precision::kFp32, 2, 37, 1e-5}, Case{Precision::kFp32, 1, 70, 1e-5},
                       Case{Precision::kBf16, 2, 45, 1e-2}, Case{Precision::kFp16, 2, 45, 1e-2}}) {
    SCOPED_TRACE(::testing::Message() << "precision " << int(c.precision) << " B " << c.B << " T " << c.T);
    const auto tokens = RandomTokens(dims.vocab, c.B * (c.T + 1), 9 + c.T);
    ExpectClose(dims, RunModel(Device::kCuda, dims, c.precision, params, tokens, c.B, c.T),
                RunModel(Device::kCpu, dims, c.precision, params, tokens, c.B, c.T), c.tol,
                Fp64Grads(dims, params, tokens, c.B, c.T));
  }
}

TEST_P(TransformerCudaTest, AStageOnDeviceArraysMatchesTheCpuStage) {
  const ModelDims dims = *LoadModel(GetParam());
  ExpectStagesMatch(dims, testing::PerturbedTransformerParams<float>(ParamLayout(dims, ShardSpec::Full(dims)), 16), 10);
}

INSTANTIATE_TEST_SUITE_P(Tiny, TransformerCudaTest,
                         ::testing::Values("tiny_transformer", "tiny_transformer_all", "tiny_transformer_screening"));

}  // namespace
}  // namespace multiscreen
