// The CPU seconds the whole process has run (CLOCK_PROCESS_CPUTIME_ID), for the kernel
// benchmarks of tests/kernels (gemm_candidates_bench, head_bench): divided by the threads
// that ran, the time each thread spent computing, which time the machine's other tenants
// took does not inflate.
#pragma once

#include <time.h>

namespace multiscreen::test {

inline double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

}  // namespace multiscreen::test
