// Wall-clock timing shared by the bench commands (bench_command.cc, bench_decode.cc):
// a monotonic clock, the seconds since a time point, and the median of a set of runs.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

namespace multiscreen::cli {

// The monotonic clock every bench times with (steady: never adjusted while a run lasts).
using BenchClock = std::chrono::steady_clock;

// Seconds of wall time from `since` (a BenchClock::now()) to now, as a double.
inline double SecondsSince(BenchClock::time_point since) {
  return std::chrono::duration<double>(BenchClock::now() - since).count();
}

// The median of the times in v (any unit): the middle one of an odd count, the mean of
// the two middle ones of an even count, 0 for none. Takes v by value (sorts its copy).
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace multiscreen::cli
