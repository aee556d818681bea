// bfloat16 and fp16 storage for the mixed-precision path on the CPU: values are
// kept as 16-bit patterns (or rounded in place) and computed on in fp32
// (DESIGN "Precision").
#pragma once

#include <cstdint>
#include <cstring>

namespace multiscreen::kernels::cpu {

// fp32 → bf16 bits, rounding to nearest even; NaN stays NaN (quieted). Without a branch, so
// that a loop of it (RoundToBf16, the softmax's bf16 numerators) compiles to vector code.
inline uint16_t FloatToBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint32_t nearest = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (bits >> 16) | 0x40u;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : nearest);
}

// bf16 bits → fp32 (exact).
inline float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &bits, 4);
  return x;
}

// x[i] ← fp32(bf16(x[i])): what a bf16 compute copy of x holds.
inline void RoundToBf16(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = Bf16ToFloat(FloatToBf16(x[i]));
}

// x[i] ← fp32(fp16(x[i])): what an IEEE half compute copy of x holds (round to
// nearest even; magnitudes past 65504 become ±inf, which loss scaling detects).
// Eight at a time through F16C on the avx2 and avx512 paths (kernels/cpu/isa.h), else one
// at a time.
void RoundToFp16(float* x, int64_t n);

}  // namespace multiscreen::kernels::cpu
