// JudgeDivergence (launch/divergence.h): the "diverged" verdict of issue 18's stability
// study on synthetic metrics.jsonl streams.
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "launch/divergence.h"

namespace multiscreen {
namespace {

DivergenceVerdict Judge(const std::string& text, int64_t warmup) {
  std::istringstream in(text);
  return JudgeDivergence(in, warmup);
}

// A healthy run: the loss falls, a validation row now and then.
TEST(DivergenceTest, AFallingLossIsNotDiverged) {
  const DivergenceVerdict v = Judge(
      "{\"step\":1,\"loss\":10.9,\"grad_norm\":3.1}\n{\"step\":2,\"loss\":10.5}\n{\"step\":3,\"loss\":9.0}\n"
      "{\"step\":3,\"val_loss\":9.2}\n{\"step\":4,\"loss\":8.1}\n",
      2);
  EXPECT_FALSE(v.diverged);
  EXPECT_EQ(v.step, 0);
  EXPECT_TRUE(v.reason.empty());
  EXPECT_DOUBLE_EQ(v.initial_loss, 10.9);
  EXPECT_EQ(v.last_step, 4);
}

// The trainer writes a non-finite loss as null (and stops in fp32): diverged at that step.
TEST(DivergenceTest, ANullLossIsDivergedAtItsStep) {
  const DivergenceVerdict v = Judge(
      "{\"step\":1,\"loss\":10.9}\n{\"step\":2,\"loss\":9.5}\n{\"step\":3,\"loss\":null,\"grad_norm\":null,\"skipped\":true}\n", 1);
  EXPECT_TRUE(v.diverged);
  EXPECT_EQ(v.step, 3);
  EXPECT_EQ(v.reason, "non-finite loss at step 3");
  EXPECT_EQ(v.last_step, 3);
}

// Non-finite during warmup counts too (only the loss-above-initial test waits for warmup).
TEST(DivergenceTest, ANullLossDuringWarmupIsDiverged) {
  const DivergenceVerdict v = Judge("{\"step\":1,\"loss\":10.9}\n{\"step\":2,\"loss\":null}\n", 100);
  EXPECT_TRUE(v.diverged);
  EXPECT_EQ(v.step, 2);
}

TEST(DivergenceTest, ANullValidationLossIsDiverged) {
  const DivergenceVerdict v = Judge("{\"step\":1,\"loss\":10.9}\n{\"step\":2,\"loss\":9.0}\n{\"step\":2,\"val_loss\":null}\n", 1);
  EXPECT_TRUE(v.diverged);
  EXPECT_EQ(v.step, 2);
  EXPECT_EQ(v.reason, "non-finite validation loss at step 2");
}

// After warmup, a loss above the first step's: diverged at the first such step.
TEST(DivergenceTest, ALossAboveTheInitialAfterWarmupIsDiverged) {
  const DivergenceVerdict v = Judge(
      "{\"step\":1,\"loss\":10.0}\n{\"step\":2,\"loss\":8.0}\n{\"step\":3,\"loss\":7.0}\n{\"step\":4,\"loss\":10.5}\n"
      "{\"step\":5,\"loss\":12.0}\n{\"step\":6,\"loss\":6.0}\n",
      3);
  EXPECT_TRUE(v.diverged);
  EXPECT_EQ(v.step, 4);
  EXPECT_EQ(v.reason, "loss 10.5000 at step 4 exceeds the initial 10.0000 after the 3-step warmup");
  EXPECT_EQ(v.last_step, 6);  // the rows after it are still read
}

// A spike above the initial loss while the lr ramps up is not divergence; the same
// spike one step after warmup is. Equal to the initial loss is not above it.
TEST(DivergenceTest, ASpikeDuringWarmupDoesNotCount) {
  const std::string text =
      "{\"step\":1,\"loss\":10.0}\n{\"step\":2,\"loss\":14.0}\n{\"step\":3,\"loss\":11.0}\n{\"step\":4,\"loss\":10.0}\n"
      "{\"step\":5,\"loss\":7.0}\n";
  EXPECT_FALSE(Judge(text, 3).diverged);
  const DivergenceVerdict early = Judge(text, 2);
  EXPECT_TRUE(early.diverged);
  EXPECT_EQ(early.step, 3);
}

// A validation loss above the initial training loss is not the criterion (it is measured
// on other data); only its non-finiteness is.
TEST(DivergenceTest, AHighFiniteValidationLossDoesNotCount) {
  EXPECT_FALSE(Judge("{\"step\":1,\"loss\":10.0}\n{\"step\":2,\"loss\":9.0}\n{\"step\":2,\"val_loss\":10.7}\n", 1).diverged);
}

// fp16: a skipped step whose scaled gradients overflowed has a finite loss and a null
// grad norm: loss scaling at work, not divergence.
TEST(DivergenceTest, AnFp16OverflowWithAFiniteLossDoesNotCount) {
  EXPECT_FALSE(Judge("{\"step\":1,\"loss\":10.0,\"grad_norm\":null,\"skipped\":true,\"loss_scale\":32768}\n"
                     "{\"step\":2,\"loss\":9.9,\"grad_norm\":2.0,\"skipped\":false}\n",
                     0)
                   .diverged);
}

// A resume drops the earlier attempt's rows past its step: their NaN no longer stands.
TEST(DivergenceTest, RowsPastAResumeNoLongerStand) {
  const std::string text =
      "{\"step\":1,\"loss\":10.0}\n{\"step\":2,\"loss\":9.0}\n{\"step\":3,\"loss\":null}\n{\"resumed_from\":2}\n"
      "{\"step\":3,\"loss\":8.0}\n{\"step\":4,\"loss\":7.5}\n";
  const DivergenceVerdict v = Judge(text, 1);
  EXPECT_FALSE(v.diverged);
  EXPECT_EQ(v.last_step, 4);
  // Without the resume row, the NaN stands.
  EXPECT_TRUE(Judge("{\"step\":1,\"loss\":10.0}\n{\"step\":3,\"loss\":null}\n{\"step\":4,\"loss\":7.5}\n", 1).diverged);
}

// A line cut by a kill, and a missing file: ignored; no steps, not diverged.
TEST(DivergenceTest, CutLinesAndMissingFilesAreNotDivergence) {
  const DivergenceVerdict v = Judge("{\"step\":1,\"loss\":10.0}\n{\"step\":2,\"lo", 0);
  EXPECT_FALSE(v.diverged);
  EXPECT_EQ(v.last_step, 1);
  const DivergenceVerdict none = ReadDivergence("/nonexistent/metrics.jsonl", 10);
  EXPECT_FALSE(none.diverged);
  EXPECT_EQ(none.last_step, 0);
}

}  // namespace
}  // namespace multiscreen
