// Instruction-set paths of the CPU kernels, chosen at run time.
//
// A default build targets baseline x86-64, since machines of one kind differ (one has
// AVX-512, the next only AVX2). The hot kernels are written once, as a body templated on
// a Target (vector width and register count below), and compiled three times through
// IsaDispatch: for baseline x86-64 (SSE2, 16-byte vectors), x86-64-v3 (AVX2 + FMA,
// 32-byte vectors, 16 registers) and x86-64-v4 (AVX-512, 64-byte vectors, 32 registers).
// Each path sizes its register tiles and vectors for what its target really has.
// ActiveIsa() picks the best path the CPU supports, capped by MULTISCREEN_ISA or
// SetIsaCap (train/bench --isa), so that every path runs, is tested and is benchmarked
// on a bigger CPU. Results differ between paths in the last bits (FMA contraction,
// vector reduction order); on one path they are deterministic.
#pragma once

#include <string>
#include <vector>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace multiscreen::kernels::cpu {

enum class Isa { kGeneric = 0, kAvx2 = 1, kAvx512 = 2 };

// "generic", "avx2", "avx512".
const char* IsaName(Isa isa);

// Parses a path name (case-insensitive; also "native": the CPU's best). Errors name the
// accepted values.
absl::StatusOr<Isa> ParseIsa(const std::string& name);

// The best path this CPU runs: avx512 needs AVX-512 F, BW, VL, DQ and CD (x86-64-v4),
// avx2 needs AVX2, FMA, F16C, BMI1/2, LZCNT and MOVBE (x86-64-v3). Not x86-64: generic.
Isa CpuIsa();

// The CPU's model name (/proc/cpuinfo's "model name", read once; "unknown CPU" where
// absent), to name beside every figure.
std::string CpuModel();

// The paths this CPU runs, generic first.
std::vector<Isa> SupportedIsas();

// The path the kernels take: CpuIsa(), capped by the environment variable MULTISCREEN_ISA
// (read on first use; a bad value or a path the CPU lacks ends the process with one line
// on stderr) or by SetIsaCap.
Isa ActiveIsa();

// Makes the kernels take `isa` from now on. Errors: the CPU lacks it (the message names
// the CPU's best). Not for use while kernels run on other threads.
absl::Status SetIsaCap(Isa isa);
// SetIsaCap by name (ParseIsa's names). Errors: an unknown name, a path the CPU lacks.
absl::Status SetIsaCap(const std::string& name);

// "avx2 path (AMD EPYC, best avx512)": the active path, the CPU and its best path, for
// start-up logs and benchmarks.
std::string IsaDescription();

// Targets: what a kernel body sizes its vectors and register tiles by.
struct TargetGeneric {
  static constexpr Isa kIsa = Isa::kGeneric;
  static constexpr int kVecBytes = 16;  // SSE2
  static constexpr int kVecRegs = 16;
};
struct TargetAvx2 {
  static constexpr Isa kIsa = Isa::kAvx2;
  static constexpr int kVecBytes = 32;
  static constexpr int kVecRegs = 16;
};
struct TargetAvx512 {
  static constexpr Isa kIsa = Isa::kAvx512;
  static constexpr int kVecBytes = 64;
  static constexpr int kVecRegs = 32;
};

#define MS_ALWAYS_INLINE __attribute__((always_inline)) inline

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__CUDACC__)
#define MS_ISA_X86 1
#define MS_TARGET_AVX2 __attribute__((target("arch=x86-64-v3")))
#define MS_TARGET_AVX512 __attribute__((target("arch=x86-64-v4")))
#else
#define MS_ISA_X86 0
#define MS_TARGET_AVX2
#define MS_TARGET_AVX512
#endif

namespace isa_internal {
// One function per target, compiled for it; K::Run must be MS_ALWAYS_INLINE so that its
// body (and the always-inline helpers it calls) is generated inside these.
template <typename K, typename... A>
decltype(auto) RunGeneric(A&&... a) {
  return K::template Run<TargetGeneric>(std::forward<A>(a)...);
}
template <typename K, typename... A>
MS_TARGET_AVX2 decltype(auto) RunAvx2(A&&... a) {
  return K::template Run<TargetAvx2>(std::forward<A>(a)...);
}
template <typename K, typename... A>
MS_TARGET_AVX512 decltype(auto) RunAvx512(A&&... a) {
  return K::template Run<TargetAvx512>(std::forward<A>(a)...);
}
}  // namespace isa_internal

// Runs K::Run<Target>(a...) for the active path: K is a class with a static member
// template `template <class Target> MS_ALWAYS_INLINE static R Run(...)`. Run must not
// open an OpenMP parallel region (GCC outlines its body before inlining, for the
// baseline target): call IsaDispatch inside the region, once per task or row block.
template <typename K, typename... A>
decltype(auto) IsaDispatch(A&&... a) {
#if MS_ISA_X86
  switch (ActiveIsa()) {
    case Isa::kAvx512: return isa_internal::RunAvx512<K>(std::forward<A>(a)...);
    case Isa::kAvx2: return isa_internal::RunAvx2<K>(std::forward<A>(a)...);
    case Isa::kGeneric: break;
  }
#endif
  return isa_internal::RunGeneric<K>(std::forward<A>(a)...);
}

}  // namespace multiscreen::kernels::cpu
