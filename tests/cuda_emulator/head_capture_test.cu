// The single-rank CUDA head (kernels/cuda/cross_entropy.h) under stream capture, the
// precondition of one CUDA graph per micro-step (issue 42 part 2): with its loss kept on the
// device (args.lse null) the head captures — targets uploaded from pinned staging, the
// products, the row pass, the loss kernel — and one replay leaves the loss sum and the
// gradients the uncaptured call leaves, bit for bit; the head that reads its statistics back
// to the host (args.lse given) waits inside the capture, which the emulator refuses as CUDA
// does, and the head's fatal check names it. A captured head adds its loss to the device
// sum on every replay; each take reads the sum and zeroes it.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/pinned_staging.h"
#include "tests/cuda_emulator/emulator_test.h"

namespace {

using multiscreen::Precision;
using multiscreen::kernels::HeadLossArgs;
namespace cuda = multiscreen::kernels::cuda;

class HeadCaptureTest : public msemu_test::EmulatorTest {
 protected:
  static constexpr int64_t kRows = 40, kV = 97, kDe = 16;
  void SetUp() override {
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    std::vector<float> y(kRows * kDe), e(kV * kDe);
    for (size_t i = 0; i < y.size(); ++i) y[i] = 0.25f * std::sin(0.7f * float(i));
    for (size_t i = 0; i < e.size(); ++i) e[i] = 0.25f * std::cos(0.3f * float(i));
    target_.resize(kRows);
    for (int64_t r = 0; r < kRows; ++r) target_[r] = r % 6 == 1 ? -1 : (r * 11) % kV;
    y_ = DeviceCopy(y);
    e_ = DeviceCopy(e);
  }
  void TearDown() override {
    cudaStreamDestroy(stream_);
    EmulatorTest::TearDown();
  }
  // The head's arguments with the gradient into dy and d_e_bar; the loss kept on the device.
  HeadLossArgs<float> Args(float* dy, float* d_e_bar) const {
    HeadLossArgs<float> a;
    a.y = y_;
    a.e_bar = e_;
    a.rows = kRows;
    a.vocab = kV;
    a.d_e = kDe;
    a.scale = 2.f;
    a.shift = std::nan("");
    a.target = target_.data();
    a.coef = 1.f / kRows;
    a.dy = dy;
    a.d_e_bar = d_e_bar;
    a.precision = Precision::kBf16;
    return a;
  }
  cudaStream_t stream_ = nullptr;
  float *y_ = nullptr, *e_ = nullptr;
  std::vector<int64_t> target_;
};

TEST_F(HeadCaptureTest, TheHeadWithItsLossOnTheDeviceCapturesAndReplaysBitForBit) {
  auto gemm = cuda::GemmRunner::Create(stream_);
  ASSERT_TRUE(gemm.ok());
  cuda::CrossEntropyScratch scratch;
  cuda::PinnedStaging staging;
  float* dy = DeviceCopy(std::vector<float>(kRows * kDe, 0.f));
  float* de = DeviceCopy(std::vector<float>(kV * kDe, 0.f));
  // Uncaptured (this also grows the scratch, which a capture may not allocate).
  cuda::HeadLoss(Args(dy, de), gemm->get(), &scratch, &staging, stream_);
  const double want = cuda::TakeHeadLoss(&scratch, stream_);
  const std::vector<float> dy_want = HostCopy(dy, kRows * kDe), de_want = HostCopy(de, kV * kDe);
  ASSERT_GT(want, 0.0);
  staging.Release();
  // Captured, nothing runs until the launch; d_e_bar is added to, so it starts from 0 again.
  ASSERT_EQ(cudaMemset(dy, 0, kRows * kDe * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemset(de, 0, kV * kDe * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  cuda::HeadLoss(Args(dy, de), gemm->get(), &scratch, &staging, stream_);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  ASSERT_NE(graph, nullptr);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  EXPECT_EQ(HostCopy(dy, kRows * kDe), std::vector<float>(kRows * kDe, 0.f));
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  EXPECT_EQ(cuda::TakeHeadLoss(&scratch, stream_), want);
  EXPECT_EQ(HostCopy(dy, kRows * kDe), dy_want);
  EXPECT_EQ(HostCopy(de, kV * kDe), de_want);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// The loss node is the same launch on every micro-batch (the take zeroes the device sum,
// no first-call flag in the kernel's arguments): a head captured once adds its loss on
// every replay, and each take reads the replays' sum since the last one.
TEST_F(HeadCaptureTest, EachReplayAddsItsLossAndEachTakeStartsANewSum) {
  auto gemm = cuda::GemmRunner::Create(stream_);
  ASSERT_TRUE(gemm.ok());
  cuda::CrossEntropyScratch scratch;
  cuda::PinnedStaging staging;
  float* dy = DeviceCopy(std::vector<float>(kRows * kDe, 0.f));
  float* de = DeviceCopy(std::vector<float>(kV * kDe, 0.f));
  EXPECT_EQ(cuda::TakeHeadLoss(&scratch, stream_), 0.0);  // nothing kept yet
  cuda::HeadLoss(Args(dy, de), gemm->get(), &scratch, &staging, stream_);  // warm-up
  const double want = cuda::TakeHeadLoss(&scratch, stream_);
  ASSERT_GT(want, 0.0);
  staging.Release();
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  cuda::HeadLoss(Args(dy, de), gemm->get(), &scratch, &staging, stream_);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  EXPECT_EQ(cuda::TakeHeadLoss(&scratch, stream_), want + want);  // two micro-batches' sum
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  EXPECT_EQ(cuda::TakeHeadLoss(&scratch, stream_), want);  // a new sum after the take
  EXPECT_EQ(cuda::TakeHeadLoss(&scratch, stream_), 0.0);   // zeroed, nothing added since
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST_F(HeadCaptureTest, TheHeadThatReadsItsStatisticsBackFailsInsideACapture) {
  const auto capture_the_old_head = [&] {
    auto gemm = cuda::GemmRunner::Create(stream_);
    cuda::CrossEntropyScratch scratch;
    cuda::PinnedStaging staging;
    float* dy = DeviceCopy(std::vector<float>(kRows * kDe, 0.f));
    float* de = DeviceCopy(std::vector<float>(kV * kDe, 0.f));
    HeadLossArgs<float> args = Args(dy, de);
    cuda::HeadLoss(args, gemm->get(), &scratch, &staging, stream_);  // warm: the scratch is grown
    std::vector<double> lse(kRows), tl(kRows);
    args.lse = lse.data();
    args.target_logit = tl.data();
    cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal);
    cuda::HeadLoss(args, gemm->get(), &scratch, &staging, stream_);
  };
  EXPECT_DEATH(capture_the_old_head(), "CUDA error in HeadLoss: operation not permitted when stream is capturing");
}

}  // namespace
