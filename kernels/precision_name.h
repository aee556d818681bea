// The name of a step's compute precision (kernels/kernel_table.h Precision) as flags,
// logs and run files write it.
#pragma once

#include <string>

#include "kernels/kernel_table.h"

namespace multiscreen {

// "fp32" | "bf16" | "fp16" (the --precision values, lower case).
std::string PrecisionName(Precision precision);

}  // namespace multiscreen
