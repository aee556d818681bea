// Timing shared by the bench commands (bench_command.cc, bench_decode.cc): a monotonic
// clock, the seconds since a time point, the calling thread's CPU clock, and the median of
// a set of runs.
#pragma once

#include <time.h>

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

// CPU seconds the calling thread has run (CLOCK_THREAD_CPUTIME_ID). On a shared machine a
// step's time on this clock leaves out the time other jobs held this thread's core; it
// still includes waits for OpenMP workers that were held off, where the waiting thread
// spins (OMP_WAIT_POLICY=active), and leaves them out where it sleeps (passive).
inline double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
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
