#include "trainer/cpu_precision.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/isa.h"

namespace multiscreen {

Precision CpuStepPrecision(Precision requested, std::string* notice) {
  if (notice != nullptr) notice->clear();
  if (requested != Precision::kBf16 || kernels::cpu::Bf16GemmAvailable()) return requested;
  if (notice != nullptr) {
    *notice = absl::StrCat("--precision=bf16: the CPU's ", kernels::cpu::IsaDescription(),
                           " has no bf16 dot products (AVX512_BF16 on the avx512 path); the step runs in fp32");
  }
  return Precision::kFp32;
}

StepPeak CpuStepPeak(const kernels::cpu::HardwarePeak& hw, const std::string& precision) {
  if (precision == "fp64") return {hw.fp32_gflops / 2, "fp64"};
  if (precision == "bf16" && hw.bf16_gflops > 0) return {hw.bf16_gflops, "bf16"};
  return {hw.fp32_gflops, "fp32"};
}

}  // namespace multiscreen
