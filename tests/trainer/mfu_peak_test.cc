// MfuPeak (trainer/mfu_peak.h): MFU's denominator never falls below what a step achieves.
#include "trainer/mfu_peak.h"

#include <gtest/gtest.h>

namespace multiscreen {
namespace {

TEST(MfuPeakTest, AStepBelowThePeakChangesNothing) {
  int measured = 0;
  MfuPeak peak(100.0, [&] { return ++measured, 500.0; });
  EXPECT_EQ(peak.Update(99.5), "");
  EXPECT_EQ(peak.Update(100.0), "");
  EXPECT_EQ(peak.gflops(), 100.0);
  EXPECT_EQ(measured, 0);
}

TEST(MfuPeakTest, AStepAboveAMeasuredPeakMeasuresItAgainOnceAndTakesTheLargest) {
  // Measured at 100 under load; the step achieves 130 (MFU 130 %): measured again, 160.
  int measured = 0;
  MfuPeak peak(100.0, [&] { return ++measured, 160.0; });
  const std::string note = peak.Update(130.0);
  EXPECT_EQ(measured, 1);
  EXPECT_EQ(peak.gflops(), 160.0);
  EXPECT_NE(note.find("a step achieved 130.0 GFLOP/s, more than the peak it divides by, 100.0 GFLOP/s"),
            std::string::npos) << note;
  EXPECT_NE(note.find("measured again now: 160.0"), std::string::npos) << note;
  EXPECT_NE(note.find("MFU now divides by 160.0 GFLOP/s"), std::string::npos) << note;
  // Still loaded when measured again (120 < 130): the achieved rate is the peak; a later
  // step past it is not measured a third time.
  MfuPeak loaded(100.0, [&] { return ++measured, 120.0; });
  loaded.Update(130.0);
  EXPECT_EQ(loaded.gflops(), 130.0);
  const std::string later = loaded.Update(140.0);
  EXPECT_EQ(measured, 2);
  EXPECT_EQ(loaded.gflops(), 140.0);
  EXPECT_NE(later.find("measured again earlier in the run"), std::string::npos) << later;
  EXPECT_LE(140.0 / loaded.gflops(), 1.0);
}

// --peak_tflops is the user's denominator: train_e2e_test's MFU x peak / tokens/s equals
// the FLOPs per token only if the given peak is kept.
TEST(MfuPeakTest, AGivenPeakIsKeptWhenAStepPassesIt) {
  MfuPeak peak(50.0, nullptr);
  EXPECT_EQ(peak.Update(75.0), "");
  EXPECT_EQ(peak.gflops(), 50.0);
}

}  // namespace
}  // namespace multiscreen
