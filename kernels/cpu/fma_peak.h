// The hardware's arithmetic peak on an instruction-set path, measured by the program
// itself (issue 44): the MFU denominator of a CPU. A GEMM rate measured at start-up reads
// low on a busy machine (its wall-clock time includes the neighbours'), and a BLAS that
// runs half-width kernels (OPENBLAS_CORETYPE=Haswell on an AVX-512 CPU) reads half the
// hardware; this probe reads neither.
//
// The probe: on each OpenMP thread, independent chains of vector multiply-adds (acc = acc·b +
// c, b and c hidden from the compiler; 12 chains on generic and avx2, which cover 2 pipes × 6
// cycles of latency in their 16 registers, 24 on avx512, whose vdpbf16ps read 10 % low with
// 12 on Zen 5), of the path's width: fp32 FMA (vfmadd) on avx512 (16 lanes) and avx2 (8 lanes);
// on generic (SSE2, no FMA) a multiply then an add (4 lanes; 2 FLOPs per pair, as an FMA).
// The bf16 dot-product probe runs vdpbf16ps (16 lanes × 2 products, 64 FLOPs an instruction)
// on the avx512 path where the CPU has AVX512_BF16. Each is timed on the thread's own CPU
// clock (CLOCK_THREAD_CPUTIME_ID), so that time the thread was not running does not count;
// the best of many 5 ms trials per thread, summed over threads; with more threads than the
// CPUs the process may run on (omp_get_num_procs), the sum is scaled by CPUs / threads
// (each thread's rate is of its own CPU time, so threads sharing a core each counted it).
// The clock: a chain of dependent integer adds (`add r, r`, one cycle each on every x86
// core) on the same CPU clock gives cycles per second, so FLOPs per cycle can be checked
// against what the path's width allows.
#pragma once

#include <vector>

#include "kernels/cpu/isa.h"

namespace multiscreen::kernels::cpu {

struct HardwarePeak {
  Isa isa = Isa::kGeneric;     // the path measured
  int threads = 0;             // OpenMP threads the probe ran on
  int cpus = 0;                // CPUs the process may run on (0: unknown)
  double cpu_share = 0;        // the CPUs this process counts: cpus, or its share of the node's (0: unknown)
  double fp32_gflops = 0;      // fp32 multiply-add peak, all threads together (at most `cpus`), GFLOP/s
  std::vector<double> fp32_thread_gflops;  // each thread's, GFLOP/s
  double bf16_gflops = 0;      // bf16 dot-product peak, all threads (0: the path or CPU has none)
  double ghz = 0;              // the clock of thread 0 while it ran the probe, GHz
  double fp32_flops_per_cycle = 0;  // thread 0's fp32 rate / its clock (one core's FLOPs per cycle)
};

// True where the CPU runs vdpbf16ps (AVX512_BF16) and AVX-512 (x86-64-v4).
bool CpuHasAvx512Bf16();

// Measures the peak of path `isa` (the CPU must run it: SupportedIsas) on every thread of an
// OpenMP parallel region of the current size, about `seconds` in all (fp32 and bf16 alike).
// `local_processes`: the processes of the job on this node (its local ranks under mpirun),
// which share its CPUs: where the process may run on more CPUs than the node's online CPUs
// divided among them (ranks not bound to their own cores), its share is that division, and
// threads past the share scale the sum down as threads past the CPUs do (two ranks of 2
// threads on 2 vCPUs each read one vCPU's peak, not the node's).
HardwarePeak MeasureHardwarePeak(Isa isa, double seconds = 0.15, int local_processes = 1);

}  // namespace multiscreen::kernels::cpu
