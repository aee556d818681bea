// ComputeGradients (and EvaluateLoss) under mpirun on the layout given by --tp=
// and --pp= (dp = ranks / (tp·pp)): on tiny_psi4 with perturbed scalars, the loss and every
// parameter's gradient equal a single-process run over the same global batch,
// for M = 1, 2 and 4 micro-batches per dp rank, with plain data parallelism and
// with ZeRO-1: within 1e-5 of each tensor's scale (its largest |value|).
//
// One exception: ∂L/∂s_E. With unit-length embeddings, normalized q, k, v and
// PLNorm, the loss is nearly invariant to the embedding scale, so this
// gradient is a small difference of large terms (Σ dx·x⁰) and fp32 rounding
// moves it by ~1e-4 relative in ANY summation order: the single fp32 process
// itself is 6e-5 off the fp64 value on this test's data (measured). It is held
// to 1e-3, which still catches a missed reduction or a wrong scale.
//
// --staged: the grid's tp, pp, dp and embedding groups are StagedCommunicators
// (parallel/staged_communicator.h: every float transfer downloaded, moved by MPI and
// uploaded through the step device's kernel table; on the CPU table, copies), the
// path of ranks that share a GPU. --device=cuda: the step on the GPU (parameters and
// gradients device arrays, the kernel table CUDA's), against the same CPU single
// process and tolerances; skipped, loudly, without a GPU. Ranks share GPU
// local_rank % count. --comm=nccl: the groups are NCCL communicators (a GPU per rank;
// on the emulated device, MULTISCREEN_EMULATED_GPUS of them).
#include <gtest/gtest.h>

#include <mpi.h>

#ifdef MULTISCREEN_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include <cmath>
#include <cstdio>
#include <cstring>
#include <tuple>
#include <vector>

#include "kernels/device_array.h"
#include "model/multiscreen.h"
#include "parallel/shard_split.h"
#include "parallel/staged_communicator.h"
#include "parallel/step.h"
#include "tests/model/test_model.h"
#include "tests/parallel/compare_shards.h"
#include "tests/parallel/mpi_test_env.h"

namespace multiscreen {
namespace {

using testing::CompareShard;
using testing::Flags;
using testing::PerturbedParams;
using testing::RandomTokens;
using testing::TinyDims;

constexpr double kTolerance = 1e-5;
constexpr double kTolerance_s_E = 1e-3;

// This shard's slice of the full model's flat buffer.
std::vector<float> SliceOf(const ParamLayout& shard, const ParamLayout& full, const std::vector<float>& values) {
  std::vector<float> out(shard.size());
  for (const ParamEntry& e : shard.entries()) {
    const ParamEntry* g = full.Find(e.name);
    const int64_t inner = e.shape.empty() ? 1 : e.size() / e.shape[0];
    const int64_t skip = e.offset.empty() ? 0 : e.offset[0] * inner;
    std::copy_n(values.begin() + g->buffer_offset + skip, e.size(), out.begin() + e.buffer_offset);
  }
  return out;
}

// The parameters: tests/model/test_model.h's WellConditionedParams (seed 7).
template <typename Real>
std::vector<Real> TestParams(const ParamLayout& full) {
  return testing::WellConditionedParams<Real>(full, 7);
}

// The step's device for this run's flags; binds this rank's GPU for --device=cuda.
Device StepDevice(int local_rank) {
  if (!Flags().cuda) return Device::kCpu;
#ifdef MULTISCREEN_HAVE_CUDA
  if (const int count = CudaDeviceCount(); count > 0) cudaSetDevice(local_rank % count);
#endif
  (void)local_rank;
  return Device::kCuda;
}

// The staged groups of a layout moved their floats through the host (a group of one
// is a SingleProcessCommunicator and moves nothing).
void ExpectStaged(ProcessGrid& grid) {
  for (Communicator* group : {&grid.tp(), &grid.pp(), &grid.dp()}) {
    if (group->size() == 1) continue;
    auto* staged = dynamic_cast<StagedCommunicator*>(group);
    ASSERT_NE(staged, nullptr) << "a group of " << group->size() << " is not staged on " << grid.Describe();
    EXPECT_GT(staged->staged_floats(), 0) << grid.Describe();
  }
}

class ParallelStepTest : public ::testing::TestWithParam<std::tuple<int64_t, bool>> {};

TEST_P(ParallelStepTest, LossAndEveryGradientEqualTheSingleProcess) {
  const auto [M, zero1] = GetParam();
  if (Flags().cuda && !CudaAvailable()) {
    std::fprintf(stderr, "\n*** SKIPPED: --device=cuda needs a CUDA device and none is visible: the layouts on the "
                         "GPU are NOT tested here ***\n\n");
    GTEST_SKIP() << "no CUDA device";
  }
  const ModelDims dims = TinyDims("tiny_psi4");
  auto grid_or = ProcessGrid::Create(Flags().tp, Flags().pp);
  ASSERT_TRUE(grid_or.ok()) << grid_or.status();
  ProcessGrid& grid = **grid_or;
  const Device device = StepDevice(grid.local_rank());
  if (Flags().staged || device != Device::kCpu) {
    const CommKind kind = Flags().staged ? CommKind::kStaged : Flags().nccl ? CommKind::kNccl : CommKind::kAuto;
    const absl::Status used = grid.UseStepDevice(device, kind);
    ASSERT_TRUE(used.ok()) << used;
  }
  // Small buckets, so that bucketing is exercised on a tiny model.
  ModelOptions options;
  options.device = device;
  auto model_or = ParallelModel::Create(grid, dims, options, DataParallelOptions{zero1, 1000});
  ASSERT_TRUE(model_or.ok()) << model_or.status();
  ParallelModel& model = **model_or;

  const int64_t B = 2, T = 16, dp = grid.shape().dp;
  const ParamLayout full(dims, ShardSpec::Full(dims));
  const std::vector<float> full_params = TestParams<float>(full);
  const std::vector<float> host_params = SliceOf(model.layout(), full, full_params);
  const int64_t seq = B * (T + 1);
  const auto tokens = RandomTokens(dims.vocab, dp * M * seq, 100 + M);

  // Parameters and gradients on the step's device, as the trainer keeps them.
  const int64_t size = model.layout().size();
  DeviceArray<float> params(device), device_grads(device);
  params.Resize(size);
  params.CopyFromHost(host_params.data());
  device_grads.Resize(size);
  auto loss = ComputeGradients(grid, model, params.data(), tokens.data() + grid.coord().dp * M * seq,
                               StepShape{M, B, T}, device_grads.data());
  ASSERT_TRUE(loss.ok()) << loss.status();
  const double norm = GlobalGradNorm(grid, model, device_grads.data());
  const std::vector<float> grads = device_grads.ToHost();
  if (Flags().staged) ExpectStaged(grid);
  if (Flags().nccl) EXPECT_EQ(grid.comm_kind(), CommKind::kNccl) << grid.Describe();
  // The same loss on every rank.
  double lo = *loss, hi = *loss;
  grid.world().AllReduce(&hi, 1, ReduceOp::kMax);
  lo = -lo;
  grid.world().AllReduce(&lo, 1, ReduceOp::kMax);
  EXPECT_EQ(-lo, hi);

  // The single process over the whole global batch of dp·M micro-batches.
  Multiscreen<float> reference(dims, ShardSpec::Full(dims));
  std::vector<float> ref_grads(full.size(), 0.0f);
  double ref_loss = 0;
  const int64_t global = dp * M;
  for (int64_t g = 0; g < global; ++g) {
    ref_loss += reference.ForwardBackward(full_params.data(), tokens.data() + g * seq, B, T, ref_grads.data(),
                                          nullptr, 1.0 / global) / global;
  }
  EXPECT_NEAR(*loss, ref_loss, kTolerance * ref_loss);
  const auto [begin, end] = zero1 ? model.data_parallel().OwnedRange() : std::make_pair<int64_t, int64_t>(0, -1);
  const auto c = CompareShard(model.layout(), grads.data(), full, ref_grads.data(), kTolerance,
                              {{"embed/s_E", kTolerance_s_E}}, begin, end);
  EXPECT_LE(c.worst, 1.0) << Describe(c) << " on " << grid.Describe();
  if (grid.world_rank() == 0) std::printf("rank 0: %s\n", Describe(c).c_str());
  EXPECT_GT(c.compared, 0);
  double ref_norm = 0;
  for (float g : ref_grads) ref_norm += double(g) * g;
  ref_norm = std::sqrt(ref_norm);
  EXPECT_NEAR(norm, ref_norm, kTolerance * ref_norm);

  // Validation's forwards-only pass gives the same loss, and leaves nothing behind
  // that changes the next training step.
  auto eval = EvaluateLoss(grid, model, params.data(), tokens.data() + grid.coord().dp * M * seq, StepShape{M, B, T});
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_NEAR(*eval, ref_loss, kTolerance * ref_loss);
  auto loss_again = ComputeGradients(grid, model, params.data(), tokens.data() + grid.coord().dp * M * seq,
                                     StepShape{M, B, T}, device_grads.data());
  ASSERT_TRUE(loss_again.ok()) << loss_again.status();
  EXPECT_EQ(*loss_again, *loss);
  EXPECT_EQ(device_grads.ToHost(), grads);
}

INSTANTIATE_TEST_SUITE_P(MicroBatches, ParallelStepTest,
                         ::testing::Combine(::testing::Values<int64_t>(1, 2, 4), ::testing::Bool()),
                         [](const auto& info) {
                           return "M" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_ZeRO1" : "_AllReduce");
                         });

// --dp_overlap (issue 15): reducing each dp bucket on the communication thread as
// soon as the last backward has finished its layers gives the same gradient bits as
// reducing them all after the backward, plain and ZeRO-1, for Multiscreen and the
// Transformer (whose replicated RMSNorm gains are tp-broadcast layer by layer then),
// with buckets small enough that several start during the backward.
class OverlapTest : public ::testing::TestWithParam<std::tuple<const char*, int64_t, bool>> {};

TEST_P(OverlapTest, ReducedGradientsAreTheSameBitsWithAndWithoutOverlap) {
  const auto [name, M, zero1] = GetParam();
  const ModelDims dims = TinyDims(name);
  if (Flags().pp > dims.n_layers) {  // every rank alike, before any collective
    GTEST_SKIP() << name << " has " << dims.n_layers << " layers, fewer than --pp=" << Flags().pp;
  }
  auto grid_or = ProcessGrid::Create(Flags().tp, Flags().pp);
  ASSERT_TRUE(grid_or.ok()) << grid_or.status();
  ProcessGrid& grid = **grid_or;
  const int64_t bucket = 300;  // elements: many buckets per layer on the tiny models
  auto plain = ParallelModel::Create(grid, dims, ModelOptions{}, DataParallelOptions{zero1, bucket, false});
  auto overlap = ParallelModel::Create(grid, dims, ModelOptions{}, DataParallelOptions{zero1, bucket, true});
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(overlap.ok()) << overlap.status();
  EXPECT_FALSE((*plain)->data_parallel().overlapped());
  EXPECT_EQ((*overlap)->data_parallel().overlapped(), grid.shape().dp > 1);

  const int64_t B = 2, T = 16, seq = B * (T + 1);
  const ParamLayout full(dims, ShardSpec::Full(dims));
  const std::vector<float> params = SliceOf((*plain)->layout(), full, PerturbedParams<float>(full, 11));
  const auto tokens = RandomTokens(dims.vocab, grid.shape().dp * M * seq, 300 + M);
  const int32_t* mine = tokens.data() + grid.coord().dp * M * seq;
  const int64_t n = (*plain)->layout().size();
  std::vector<float> want(n), got(n, 7.0f);
  auto want_loss = ComputeGradients(grid, **plain, params.data(), mine, StepShape{M, B, T}, want.data());
  ASSERT_TRUE(want_loss.ok()) << want_loss.status();
  // Twice: the second step reuses the thread and the buckets' state.
  for (int step = 0; step < 2; ++step) {
    auto got_loss = ComputeGradients(grid, **overlap, params.data(), mine, StepShape{M, B, T}, got.data());
    ASSERT_TRUE(got_loss.ok()) << got_loss.status();
    EXPECT_EQ(*got_loss, *want_loss);
    // Every element, the unreduced rest of a ZeRO-1 buffer included, bit for bit.
    int64_t differ = 0, first = -1;
    for (int64_t i = 0; i < n; ++i) {
      if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && differ++ == 0) first = i;
    }
    EXPECT_EQ(differ, 0) << "first at element " << first << " of " << n << " on " << grid.Describe();
    // The overlap happened: some buckets started while the backward was still running.
    if (grid.shape().dp > 1) EXPECT_GT((*overlap)->data_parallel().buckets_started_early(), 0);
    const StepCommTimes& t = (*overlap)->comm_times();
    EXPECT_GE(t.dp_wait_s, 0);
    EXPECT_GE(t.after_backward_s, 0);
    EXPECT_TRUE(std::isfinite(t.exposed_s()));
  }
  if (grid.world_rank() == 0) {
    std::printf("rank 0: %s M=%lld %s: %lld buckets of %lld elements started during the backward\n", name, (long long)M,
                zero1 ? "ZeRO-1" : "all-reduce", (long long)(*overlap)->data_parallel().buckets_started_early(),
                (long long)bucket);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, OverlapTest,
                         ::testing::Combine(::testing::Values("tiny_psi4", "tiny_transformer_train"),
                                            ::testing::Values<int64_t>(1, 3), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) + "_M" +
                                  std::to_string(std::get<1>(info.param)) +
                                  (std::get<2>(info.param) ? "_ZeRO1" : "_AllReduce");
                         });

// The tensor-parallel model itself in fp64 (the tp group of this layout, every
// layer on every rank): equal to the single process to rounding, s_E included,
// which shows that the looser fp32 bound on s_E above is rounding, not a bug. For
// Multiscreen (tiles and vocabulary split) and the Transformer baseline (heads, the
// SwiGLU width — 21 and 85 hidden units here, so split unevenly — and vocabulary
// split; issue 18), plain and with every switch (qk_norm, sio, pl_norm); Multiscreen
// also with issue 30's ablations (RoPE, no output gate: a layout without W_G).
class TensorParallelTest : public ::testing::TestWithParam<const char*> {};

TEST_P(TensorParallelTest, Fp64ShardsEqualTheSingleProcessToRoundoff) {
  const ModelDims dims = TinyDims(GetParam(), LoadModel(GetParam())->pl_norm);
  auto grid_or = ProcessGrid::Create(Flags().tp, Flags().pp);
  ASSERT_TRUE(grid_or.ok()) << grid_or.status();
  ProcessGrid& grid = **grid_or;
  const GridShape tp_only{grid.shape().tp, 1, 1};
  auto shard = ShardForCoord(dims, tp_only, GridCoord{grid.coord().tp, 0, 0});
  ASSERT_TRUE(shard.ok()) << shard.status();
  auto model_ptr = MakeModelStage<double>(dims, *shard, ModelOptions{}, &grid.tp());
  ModelStage<double>& model = *model_ptr;
  const ParamLayout full(dims, ShardSpec::Full(dims));
  const std::vector<double> full_params = TestParams<double>(full);
  std::vector<double> params(model.layout().size());
  for (const ParamEntry& e : model.layout().entries()) {
    const ParamEntry* g = full.Find(e.name);
    const int64_t skip = e.offset.empty() ? 0 : e.offset[0] * (e.size() / e.shape[0]);
    std::copy_n(full_params.begin() + g->buffer_offset + skip, e.size(), params.begin() + e.buffer_offset);
  }
  const int64_t B = 2, T = 16;
  const auto tokens = RandomTokens(dims.vocab, B * (T + 1), 5);
  std::vector<double> grads(model.layout().size(), 0.0), ref_grads(full.size(), 0.0);
  const double loss = model.ForwardBackward(params.data(), tokens.data(), B, T, grads.data());
  auto reference = MakeModelStage<double>(dims, ShardSpec::Full(dims));
  const double ref_loss = reference->ForwardBackward(full_params.data(), tokens.data(), B, T, ref_grads.data());
  EXPECT_NEAR(loss, ref_loss, 1e-12 * ref_loss);
  double worst = 0;
  std::string worst_name;
  for (const ParamEntry& e : model.layout().entries()) {
    const ParamEntry* g = full.Find(e.name);
    const int64_t skip = e.offset.empty() ? 0 : e.offset[0] * (e.size() / e.shape[0]);
    double scale = 1e-300;
    for (int64_t i = 0; i < g->size(); ++i) scale = std::max(scale, std::abs(ref_grads[g->buffer_offset + i]));
    for (int64_t i = 0; i < e.size(); ++i) {
      const double err = std::abs(grads[e.buffer_offset + i] - ref_grads[g->buffer_offset + skip + i]) / scale;
      if (err > worst) {
        worst = err;
        worst_name = e.name;
      }
    }
  }
  EXPECT_LE(worst, 1e-9) << "at " << worst_name << " on " << grid.Describe();
  if (grid.world_rank() == 0) {
    std::printf("rank 0: %s fp64 tp worst relative error %.3g at %s\n", GetParam(), worst, worst_name.c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TensorParallelTest,
                         ::testing::Values("tiny_psi4", "tiny_psi4_rope_nogate", "tiny_transformer_train",
                                           "tiny_transformer_all", "tiny_transformer_screening"));

}  // namespace
}  // namespace multiscreen
