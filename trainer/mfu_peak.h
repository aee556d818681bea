// The MFU denominator as a run goes on (issue 43). A GEMM rate measured at start-up
// reads low when the machine was busy then (a neighbour's job, the other ranks' start),
// and MFU read above 100 % (101–149 % seen on the 2-core machine); the CPU's peak is now
// the hardware's multiply-add peak, probed on the threads' CPU clocks (issue 44). A step
// that achieves more than the peak proves the peak stale: the peak is then measured
// again, once per run, and becomes the largest of the old peak, the new measurement and
// the achieved rate. MFU never passes 1, and the log says when the figure was raised. A
// peak given by --peak_tflops is kept as given (the user's denominator; MFU may pass 1).
#pragma once

#include <functional>
#include <string>

namespace multiscreen {

class MfuPeak {
 public:
  // `gflops`: the starting peak of all processes together, GFLOP/s (> 0). `remeasure`:
  // measures it again (all processes, GFLOP/s), or null where the peak was given.
  MfuPeak(double gflops, std::function<double()> remeasure);

  // The peak to divide a step's rate by, after Update.
  double gflops() const { return gflops_; }

  // Takes a step that achieved `achieved_gflops` (its tokens/s × FLOPs per token / 1e9).
  // Where that passes a measured peak, raises the peak (above) and returns one line saying
  // so, naming the old figure, the achieved rate and the new one; else (or where the peak
  // was given) returns "".
  std::string Update(double achieved_gflops);

 private:
  double gflops_;
  std::function<double()> remeasure_;
  bool remeasured_ = false;
};

}  // namespace multiscreen
