#include "kernels/cpu/fma_peak.h"

#include <omp.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#if MS_ISA_X86
#include <immintrin.h>
#endif

namespace multiscreen::kernels::cpu {

namespace {

// Independent accumulators: 2 pipes × 6 cycles of latency, in the 16 vector registers of SSE2
// and AVX2. The chain loops are unrolled by pragma, so that the accumulators live in registers
// at any optimization level.
constexpr int kChains = 12;
// AVX-512's 32 registers hold 24: vdpbf16ps read 10–11 % below its rate with 12 chains on
// Zen 5 (1 thread: 404–418 GFLOP/s against 450–463 with 24, 443–452 with 16; bf16 / fp32
// 1.84–1.87 against 2.00–2.04), and the fp32 FMA 1–3 % below.
constexpr int kChains512 = 24;
constexpr int64_t kBurst = 1 << 14;    // iterations between clock reads
volatile float g_sink;                 // the chains' sum lands here, so that none is dead code

double ThreadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Runs burst(kBurst) until `seconds` of this thread's CPU time have passed; returns the
// FLOPs per second (burst returns the FLOPs it did).
template <typename Burst>
double RateOnThreadClock(Burst burst, double seconds) {
  const double start = ThreadSeconds();
  double flops = 0, elapsed = 0;
  do {
    flops += burst();
    elapsed = ThreadSeconds() - start;
  } while (elapsed < seconds);
  return flops / elapsed;
}

// One burst of each path's multiply-add chains; returns its FLOPs.
double GenericBurst() {
  typedef float V __attribute__((vector_size(16)));
  V acc[kChains], b = {0.999f, 0.999f, 0.999f, 0.999f}, c = {1e-3f, 1e-3f, 1e-3f, 1e-3f};
  for (int j = 0; j < kChains; ++j) acc[j] = V{} + float(j);
#if MS_ISA_X86
  asm volatile("" : "+x"(b), "+x"(c));
#endif
  for (int64_t i = 0; i < kBurst; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kChains; ++j) acc[j] = acc[j] * b + c;  // mulps, addps: no FMA on SSE2
  }
  V s = acc[0];
  for (int j = 1; j < kChains; ++j) s += acc[j];
  g_sink = s[0];
  return 2.0 * 4 * kChains * double(kBurst);
}

#if MS_ISA_X86
MS_TARGET_AVX2 double Avx2Burst() {
  __m256 acc[kChains], b = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-3f);
  for (int j = 0; j < kChains; ++j) acc[j] = _mm256_set1_ps(float(j));
  asm volatile("" : "+x"(b), "+x"(c));
  for (int64_t i = 0; i < kBurst; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kChains; ++j) acc[j] = _mm256_fmadd_ps(acc[j], b, c);
  }
  __m256 s = acc[0];
  for (int j = 1; j < kChains; ++j) s = _mm256_add_ps(s, acc[j]);
  g_sink = _mm256_cvtss_f32(s);
  return 2.0 * 8 * kChains * double(kBurst);
}

MS_TARGET_AVX512 double Avx512Burst() {
  __m512 acc[kChains512], b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-3f);
  for (int j = 0; j < kChains512; ++j) acc[j] = _mm512_set1_ps(float(j));
  asm volatile("" : "+v"(b), "+v"(c));
  for (int64_t i = 0; i < kBurst; ++i) {
#pragma GCC unroll 24
    for (int j = 0; j < kChains512; ++j) acc[j] = _mm512_fmadd_ps(acc[j], b, c);
  }
  __m512 s = acc[0];
  for (int j = 1; j < kChains512; ++j) s = _mm512_add_ps(s, acc[j]);
  g_sink = _mm512_reduce_add_ps(s);
  return 2.0 * 16 * kChains512 * double(kBurst);
}

// vdpbf16ps: each of 16 fp32 lanes adds two bf16 products, 4 FLOPs a lane.
__attribute__((target("arch=x86-64-v4,avx512bf16"))) double Bf16Burst() {
  __m512 acc[kChains512];
  for (int j = 0; j < kChains512; ++j) acc[j] = _mm512_set1_ps(float(j));
  __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  __m512bh y = x;
  asm volatile("" : "+v"(x), "+v"(y));
  for (int64_t i = 0; i < kBurst; ++i) {
#pragma GCC unroll 24
    for (int j = 0; j < kChains512; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], x, y);
  }
  __m512 s = acc[0];
  for (int j = 1; j < kChains512; ++j) s = _mm512_add_ps(s, acc[j]);
  g_sink = _mm512_reduce_add_ps(s);
  return 4.0 * 16 * kChains512 * double(kBurst);
}

// A chain of dependent register adds, one cycle each: returns the cycles it took.
double ClockBurst() {
  uint64_t x = 1;
  for (int64_t i = 0; i < kBurst; ++i) {
    asm volatile(".rept 32\n\tadd %0, %0\n\t.endr" : "+r"(x));
  }
  g_sink = float(x & 1);
  return 32.0 * double(kBurst);
}
#endif

double Fp32Burst(Isa isa) {
#if MS_ISA_X86
  switch (isa) {
    case Isa::kAvx512: return Avx512Burst();
    case Isa::kAvx2: return Avx2Burst();
    case Isa::kGeneric: break;
  }
#endif
  (void)isa;
  return GenericBurst();
}

}  // namespace

bool CpuHasAvx512Bf16() {
#if MS_ISA_X86
  return CpuIsa() == Isa::kAvx512 && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

HardwarePeak MeasureHardwarePeak(Isa isa, double seconds, int local_processes) {
  HardwarePeak peak;
  peak.isa = isa;
  const bool bf16 = isa == Isa::kAvx512 && CpuHasAvx512Bf16();
  // Many short trials, the best of each kind: a probe only ever reads low (time the
  // hypervisor held the vCPU can still count as the thread's), and on a loaded machine a
  // 5 ms trial is more often undisturbed than a 50 ms one. On the 2-core machine at load 6,
  // 3 trials of 50 ms read 185 to 223 GFLOP/s for one thread on avx512.
  constexpr double kTrialSeconds = 0.005;
  const int kinds = bf16 ? 3 : 2;  // fp32, the clock (and bf16)
  const int trials = std::max(3, int(seconds / kinds / kTrialSeconds));
  const double trial = seconds / kinds / trials;
  std::vector<double> fp32(omp_get_max_threads(), 0), dot(fp32.size(), 0);
  double ghz = 0;
  int team = 1;
#pragma omp parallel
  {
    const int t = omp_get_thread_num();
    if (t == 0) team = omp_get_num_threads();
    for (int k = 0; k < trials; ++k) {
      fp32[t] = std::max(fp32[t], RateOnThreadClock([isa] { return Fp32Burst(isa); }, trial));
#if MS_ISA_X86
      if (bf16) dot[t] = std::max(dot[t], RateOnThreadClock(Bf16Burst, trial));
      if (t == 0) ghz = std::max(ghz, 1e-9 * RateOnThreadClock(ClockBurst, trial));
#endif
    }
  }
  peak.threads = team;
  for (int t = 0; t < peak.threads; ++t) {
    peak.fp32_thread_gflops.push_back(1e-9 * fp32[t]);
    peak.fp32_gflops += 1e-9 * fp32[t];
    peak.bf16_gflops += 1e-9 * dot[t];
  }
  // Threads past the CPUs share them, each rate of its own CPU time: the CPUs' peak is the
  // mean thread's rate times their number (--threads=8 on 2 vCPUs read 4x the machine).
  // OpenMP's count of them, taken from the process's affinity when it started: under
  // OMP_PROC_BIND the main thread is bound to one CPU by now, and sched_getaffinity read 1 (the
  // peak halved on 2 vCPUs: the fresh-eyes pass).
  peak.cpus = omp_get_num_procs();
  // Ranks of one node that may all run on its every CPU share them (a rank bound to its own
  // cores sees only those, no more than its share).
  peak.cpu_share = peak.cpus;
  if (const long online = sysconf(_SC_NPROCESSORS_ONLN); peak.cpus > 0 && online > 0 && local_processes > 1) {
    peak.cpu_share = std::min<double>(peak.cpus, double(online) / local_processes);
  }
  if (peak.cpu_share > 0 && peak.threads > peak.cpu_share) {
    const double share = peak.cpu_share / peak.threads;
    peak.fp32_gflops *= share;
    peak.bf16_gflops *= share;
  }
  peak.ghz = ghz;
  if (ghz > 0) peak.fp32_flops_per_cycle = peak.fp32_thread_gflops[0] / ghz;
  return peak;
}

}  // namespace multiscreen::kernels::cpu
