#include "kernels/cpu/gemm_bf16.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/fma_peak.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/onednn_matmul.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MS_HAVE_BF16_SIMD 1
#endif

namespace multiscreen::kernels::cpu {

namespace {

void ToBf16Scalar(const float* src, int64_t n, uint16_t* dst, float* rounded) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t bits = FloatToBf16(src[i]);
    if (dst != nullptr) dst[i] = bits;
    if (rounded != nullptr) rounded[i] = Bf16ToFloat(bits);
  }
}

#ifdef MS_HAVE_BF16_SIMD
// FloatToBf16's integer rounding, eight lanes at a time (vcvtneps2bf16 would be one
// instruction, but it flushes subnormal inputs to zero, which FloatToBf16 does not).
__attribute__((target("avx2"))) void ToBf16Avx2(const float* src, int64_t n, uint16_t* dst, float* rounded) {
  const __m256i exp_mask = _mm256_set1_epi32(0x7f800000), man_mask = _mm256_set1_epi32(0x007fffff);
  const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1), quiet = _mm256_set1_epi32(0x00400000);
  const __m256i high = _mm256_set1_epi32(int(0xffff0000u));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i bits = _mm256_castps_si256(_mm256_loadu_ps(src + i));
    const __m256i nan = _mm256_andnot_si256(
        _mm256_cmpeq_epi32(_mm256_and_si256(bits, man_mask), _mm256_setzero_si256()),
        _mm256_cmpeq_epi32(_mm256_and_si256(bits, exp_mask), exp_mask));
    const __m256i up = _mm256_add_epi32(bits, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(bits, 16), one)));
    const __m256i out = _mm256_and_si256(_mm256_blendv_epi8(up, _mm256_or_si256(bits, quiet), nan), high);
    if (rounded != nullptr) _mm256_storeu_ps(rounded + i, _mm256_castsi256_ps(out));
    if (dst == nullptr) continue;
    // The high halves of the eight lanes, in order: shift down, pack (per 128-bit lane), reorder.
    const __m256i low = _mm256_srli_epi32(out, 16);
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(low, low), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_castsi256_si128(packed));
  }
  ToBf16Scalar(src + i, n - i, dst != nullptr ? dst + i : nullptr, rounded != nullptr ? rounded + i : nullptr);
}
#endif

// One oneDNN bf16 product of a small shape: whether this oneDNN runs bf16 matmuls here.
bool OnednnRunsBf16() {
  static const bool runs = [] {
    const std::vector<uint16_t> a(4 * 8, FloatToBf16(1.f)), b(8 * 4, FloatToBf16(0.5f));
    std::vector<float> c(4 * 4, 0.f);
    return OnednnMatmul(MatmulOperands::kBf16, false, false, 4, 4, 8, 1.f, a.data(), 8, b.data(), 4, false, c.data(), 4) &&
           c[0] == 4.f;
  }();
  return runs;
}

// The [rows, cols] block of a bf16 matrix (row stride ld) widened to a compact fp32 one.
std::vector<float> Widen(const uint16_t* x, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) out[r * cols + j] = Bf16ToFloat(x[r * ld + j]);
  }
  return out;
}

}  // namespace

bool Bf16GemmAvailable() {
  return ActiveIsa() == Isa::kAvx512 && CpuHasAvx512Bf16() && OnednnRunsBf16();
}

void ToBf16(const float* src, int64_t n, uint16_t* dst, float* rounded) {
  constexpr int64_t kBlock = 1 << 14;
#pragma omp parallel for schedule(static) if (n > 4 * kBlock)
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t len = std::min(kBlock, n - i0);
    float* r = rounded != nullptr ? rounded + i0 : nullptr;
    uint16_t* d = dst != nullptr ? dst + i0 : nullptr;
#ifdef MS_HAVE_BF16_SIMD
    if (ActiveIsa() != Isa::kGeneric) {
      ToBf16Avx2(src + i0, len, d, r);
      continue;
    }
#endif
    ToBf16Scalar(src + i0, len, d, r);
  }
}

void GemmBf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
              int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k > 0 && std::isfinite(alpha) && alpha != 0.f && (beta == 0.f || beta == 1.f) &&
      OnednnMatmul(MatmulOperands::kBf16, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta == 1.f, c, ldc)) {
    return;
  }
  const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k, b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
  const std::vector<float> wa = Widen(a, a_rows, a_cols, lda), wb = Widen(b, b_rows, b_cols, ldb);
  Gemm<float>(trans_a, trans_b, m, n, k, alpha, wa.data(), a_cols, wb.data(), b_cols, beta, c, ldc);
}

}  // namespace multiscreen::kernels::cpu
