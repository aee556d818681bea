#include "trainer/mfu_peak.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"

namespace multiscreen {

MfuPeak::MfuPeak(double gflops, std::function<double()> remeasure)
    : gflops_(gflops), remeasure_(std::move(remeasure)) {}

std::string MfuPeak::Update(double achieved_gflops) {
  // A peak given by --peak_tflops is the user's denominator (a datasheet figure, say):
  // kept as given, even where a step passes it.
  if (!remeasure_ || !(achieved_gflops > gflops_)) return "";
  const double old = gflops_;
  std::string how;
  double measured = 0;
  if (remeasured_) {
    how = "measured again earlier in the run";
  } else {
    measured = remeasure_();
    remeasured_ = true;  // once: a busy machine reads low again, and each costs a pause
    how = absl::StrFormat("measured at start on a busy machine; measured again now: %.1f", measured);
  }
  gflops_ = std::max({old, measured, achieved_gflops});
  return absl::StrFormat(
      "MFU: a step achieved %.1f GFLOP/s, more than the peak it divides by, %.1f GFLOP/s (%s): that peak was stale; "
      "MFU now divides by %.1f GFLOP/s",
      achieved_gflops, old, how, gflops_);
}

}  // namespace multiscreen
