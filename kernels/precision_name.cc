#include "kernels/precision_name.h"

namespace multiscreen {

std::string PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
  }
  return "?";
}

}  // namespace multiscreen
