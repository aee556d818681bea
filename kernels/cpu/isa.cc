#include "kernels/cpu/isa.h"
#include "kernels/cpu/isa_environment.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace multiscreen::kernels::cpu {
namespace {

constexpr int kUnset = -1;
std::atomic<int> active{kUnset};

Isa DetectCpuIsa() {
#if MS_ISA_X86
  __builtin_cpu_init();
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi") &&
                  __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("movbe");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512cd");
  return v4 ? Isa::kAvx512 : (v3 ? Isa::kAvx2 : Isa::kGeneric);
#else
  return Isa::kGeneric;
#endif
}

std::string ReadCpuModel() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  }
  return "unknown CPU";
}

// A path the CPU can run, else why not.
absl::Status CheckCpuRuns(Isa isa) {
  if (static_cast<int>(isa) <= static_cast<int>(CpuIsa())) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("this CPU cannot run the ", IsaName(isa), " path (its best is ", IsaName(CpuIsa()), ")"));
}

// A path name the CPU can run (ParseIsa, then CheckCpuRuns).
absl::StatusOr<Isa> ParseRunnableIsa(const std::string& name) {
  absl::StatusOr<Isa> isa = ParseIsa(name);
  if (!isa.ok()) return isa.status();
  if (absl::Status s = CheckCpuRuns(*isa); !s.ok()) return s;
  return isa;
}

// MULTISCREEN_ISA's path (nullopt when unset or empty), or why it is not one.
absl::StatusOr<std::optional<Isa>> IsaFromEnvironment() {
  const char* env = std::getenv("MULTISCREEN_ISA");
  if (env == nullptr || *env == '\0') return std::nullopt;
  const absl::StatusOr<Isa> isa = ParseRunnableIsa(env);
  if (!isa.ok()) {
    // Escaped (here and in ParseIsa's message): the value is the user's, and the error
    // must stay one line.
    return absl::Status(isa.status().code(), absl::StrCat("MULTISCREEN_ISA=", absl::CHexEscape(env), ": ",
                                                          isa.status().message()));
  }
  return *isa;
}

// The first use: MULTISCREEN_ISA, or the CPU's best. A command has checked the variable
// (CheckIsaEnvironment); a program that did not ends here on a bad one.
int FromEnvironment() {
  const absl::StatusOr<std::optional<Isa>> isa = IsaFromEnvironment();
  if (!isa.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(isa.status().message()).c_str());
    std::exit(2);
  }
  return static_cast<int>(isa->value_or(CpuIsa()));
}

}  // namespace

absl::Status CheckIsaEnvironment() { return IsaFromEnvironment().status(); }

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    case Isa::kGeneric: break;
  }
  return "generic";
}

absl::StatusOr<Isa> ParseIsa(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "native") return CpuIsa();
  for (Isa isa : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512}) {
    if (lower == IsaName(isa)) return isa;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown instruction-set path '", absl::CHexEscape(name),
                   "' (expected generic, avx2, avx512 or native)"));
}

Isa CpuIsa() {
  static const Isa cpu = DetectCpuIsa();
  return cpu;
}

std::string CpuModel() {
  static const std::string model = ReadCpuModel();
  return model;
}

std::vector<Isa> SupportedIsas() {
  std::vector<Isa> out;
  for (int i = 0; i <= static_cast<int>(CpuIsa()); ++i) out.push_back(static_cast<Isa>(i));
  return out;
}

Isa ActiveIsa() {
  int isa = active.load(std::memory_order_relaxed);
  if (isa == kUnset) {
    static const int initial = FromEnvironment();  // once, thread-safe
    int expected = kUnset;
    active.compare_exchange_strong(expected, initial);
    isa = active.load(std::memory_order_relaxed);
  }
  return static_cast<Isa>(isa);
}

absl::Status SetIsaCap(Isa isa) {
  if (absl::Status s = CheckCpuRuns(isa); !s.ok()) return s;
  active.store(static_cast<int>(isa), std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status SetIsaCap(const std::string& name) {
  const absl::StatusOr<Isa> isa = ParseRunnableIsa(name);
  return isa.ok() ? SetIsaCap(*isa) : isa.status();
}

std::string IsaDescription() {
  return absl::StrCat(IsaName(ActiveIsa()), " path (", CpuModel(), ", best ", IsaName(CpuIsa()), ")");
}

}  // namespace multiscreen::kernels::cpu
