// What a CPU step computes in for a requested precision, and the hardware peak its MFU
// divides by (issue 44). bf16 on the CPU is a real compute format only where the kernels'
// path has the bf16 dot products (kernels/cpu/gemm_bf16.h Bf16GemmAvailable: avx512 and
// AVX512_BF16); elsewhere rounding fp32 operands to bf16 would only make the fp32 step
// slower, so train and bench run the fp32 step and say so once.
#pragma once

#include <string>

#include "kernels/cpu/fma_peak.h"
#include "kernels/kernel_table.h"

namespace multiscreen {

// `requested` as the CPU step runs it: kBf16 becomes kFp32 where the path has no bf16 dot
// products, and *notice (may be null) is then one line saying so (naming the path and the
// CPU); else `requested`, and *notice is "".
Precision CpuStepPrecision(Precision requested, std::string* notice);

// The peak a CPU step in `precision` is measured against: "fp32" (and "fp16", whose CPU step
// computes in fp32 on rounded operands): the fp32 multiply-add peak; "fp64": half of it (half
// the lanes; the probe's pipes are the fp64 ones too); "bf16" (a step CpuStepPrecision kept in
// bf16): the bf16 dot-product peak. GFLOP/s; `precision` names the peak ("fp32", "fp64",
// "bf16"), for --json's hw_peak_precision.
struct StepPeak {
  double gflops = 0;
  std::string precision;
};
StepPeak CpuStepPeak(const kernels::cpu::HardwarePeak& hw, const std::string& precision);

}  // namespace multiscreen
