#include "kernels/cpu/bf16.h"

#include "kernels/cpu/isa.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MS_HAVE_F16C_PATH 1
#endif

namespace multiscreen::kernels::cpu {
namespace {

void RoundToFp16Scalar(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(static_cast<_Float16>(x[i]));
}

#ifdef MS_HAVE_F16C_PATH
// Without F16C, GCC converts each value through a libgcc call, ~40× slower.
__attribute__((target("avx,f16c"))) void RoundToFp16F16c(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i half = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(half));
  }
  for (; i < n; ++i) x[i] = static_cast<float>(static_cast<_Float16>(x[i]));
}
#endif

}  // namespace

void RoundToFp16(float* x, int64_t n) {
#ifdef MS_HAVE_F16C_PATH
  // F16C is part of the avx2 path (x86-64-v3); capped to generic, the scalar loop.
  if (ActiveIsa() != Isa::kGeneric) return RoundToFp16F16c(x, n);
#endif
  RoundToFp16Scalar(x, n);
}

}  // namespace multiscreen::kernels::cpu
