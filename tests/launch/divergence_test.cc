// JudgeDivergence (launch/divergence.h): the "diverged" verdict of issue 18's stability
// study on synthetic metrics.jsonl streams.
#include <sstream>
#include <string>
#include <vector>

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

// Metrics rows {"step": first + i, "loss": losses[i]}.
std::string Rows(int64_t first, const std::vector<double>& losses) {
  std::string text;
  for (size_t i = 0; i < losses.size(); ++i) {
    text += "{\"step\":" + std::to_string(first + int64_t(i)) + ",\"loss\":" + std::to_string(losses[i]) + "}\n";
  }
  return text;
}

// Issue 31's sweep: the loss falls slowly from 11.25 to 10.95 with ±0.15 of step noise,
// and single steps after warmup are above step 1's loss. Healthy: not diverged.
TEST(DivergenceTest, ANoisyButHealthyRunIsNotDiverged) {
  std::vector<double> losses;
  for (int i = 0; i < 60; ++i) losses.push_back(11.25 - 0.005 * i + (i % 3 == 1 ? 0.15 : -0.1));
  losses[10] = 11.4;  // one step above the first's 11.25 + 0.15 - ..., after warmup
  const std::string text = Rows(1, losses);
  EXPECT_FALSE(Judge(text, 3).diverged) << Judge(text, 3).reason;
}

// A spike that recovers within the window is not a blow-up either.
TEST(DivergenceTest, ASpikeThatRecoversIsNotDiverged) {
  std::vector<double> losses(40, 6.0);
  losses[0] = 10.0;
  losses[20] = losses[21] = 9.5;  // two steps 3.5 up, then back: the mean moves 0.7 < 1.0
  EXPECT_FALSE(Judge(Rows(1, losses), 5).diverged);
}

// A loss that jumps and stays up is diverged, with the evidence: here it never exceeds the
// first step's loss, but stands 1.9 nats above where it had been.
TEST(DivergenceTest, ALossThatStaysFarAboveItsBestIsDiverged) {
  std::vector<double> losses;
  for (int i = 0; i < 30; ++i) losses.push_back(10.0 - 0.2 * i);  // 10 → 4.2
  for (int i = 0; i < 20; ++i) losses.push_back(7.0);              // steps 31..50
  const DivergenceVerdict v = Judge(Rows(1, losses), 5);
  EXPECT_TRUE(v.diverged);
  // The lowest mean is steps 21..30's (6.0 … 4.2: 5.1); the margin is a third of the
  // progress, (10 − 5.1) / 3 = 1.6333 (more than 10% of 10). Steps 30..39's mean (4.2, then
  // 7.0 × 9: 6.72) is within it; steps 31..40's (7.0) is past it.
  EXPECT_EQ(v.step, 40);
  EXPECT_EQ(v.reason,
            "mean loss 7.0000 over steps 31-40 is 1.9000 above the lowest earlier mean 5.1000 (steps 21-30), more than "
            "the margin 1.6333 (after the 5-step warmup)");
  EXPECT_EQ(v.last_step, 50);  // the rows after it are still read
}

// A run near zero loss on easy data: a bump of 0.57 nats over ten steps is noise there (a
// third of its 4.9 nats of progress is 1.6), as in the sweep tests' synthetic runs.
TEST(DivergenceTest, ABumpSmallAgainstTheProgressIsNotDiverged) {
  std::vector<double> losses;
  for (int i = 0; i < 40; ++i) losses.push_back(5.0 - 0.12 * i);  // 5 → 0.32
  for (int i = 0; i < 10; ++i) losses.push_back(0.16);
  for (int i = 0; i < 10; ++i) losses.push_back(0.72);
  for (int i = 0; i < 10; ++i) losses.push_back(0.2);
  EXPECT_FALSE(Judge(Rows(1, losses), 5).diverged) << Judge(Rows(1, losses), 5).reason;
}

// A run that rises from its first step and stays up, judged against the first step's loss.
TEST(DivergenceTest, ALossThatStaysAboveTheFirstStepsIsDiverged) {
  std::vector<double> losses(30, 12.5);
  losses[0] = 10.0;
  const DivergenceVerdict v = Judge(Rows(1, losses), 3);
  EXPECT_TRUE(v.diverged);
  EXPECT_EQ(v.step, 10);
  EXPECT_NE(v.reason.find("above the first step's loss 10.0000"), std::string::npos) << v.reason;
}

// During warmup the same blow-up does not count; one window past warmup it does.
TEST(DivergenceTest, ABlowUpCountsOnlyAfterWarmup) {
  std::vector<double> losses(30, 12.5);
  losses[0] = 10.0;
  EXPECT_EQ(Judge(Rows(1, losses), 20).step, 21);
  EXPECT_FALSE(Judge(Rows(1, losses), 30).diverged);
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
