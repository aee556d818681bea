// GEMMs on bf16 operands with fp32 accumulation on the CPU's bf16 dot products (issue 44):
// the CPU's --precision=bf16 step. AVX512_BF16 (vdpbf16ps) on the avx512 path, AMX-BF16
// where the CPU has it (oneDNN picks; kernels/cpu/onednn_matmul.h). A product of two bf16
// values is exact in fp32, so GemmBf16 is the fp32 product of the bf16-rounded operands up to
// the order of the fp32 sums.
#pragma once

#include <cstdint>

namespace multiscreen::kernels::cpu {

// True where the kernels' path (ActiveIsa(): --isa, MULTISCREEN_ISA) is avx512, the CPU has
// AVX512_BF16 and oneDNN runs a bf16 matmul here (tried once). Elsewhere a bf16 step would
// only emulate bf16 by rounding fp32 operands (slower than fp32): train and bench run fp32.
bool Bf16GemmAvailable();

// dst[i] = bf16 bits of src[i], rounded to nearest even (NaN stays NaN, as FloatToBf16,
// kernels/cpu/bf16.h, bit for bit); rounded (null, or src itself for in place) [i] = the fp32
// value of dst[i]. One pass, eight at a time on the avx2 and avx512 paths, threaded. dst
// null: the rounded values alone (ToBf16(x, n, nullptr, x) is RoundToBf16(x, n), threaded).
void ToBf16(const float* src, int64_t n, uint16_t* dst, float* rounded);

// C[m, n] = alpha · op(A) · op(B) + beta · C, row-major, as kernels/cpu/gemm.h's Gemm, on A
// and B held as bf16 bit patterns (row strides lda, ldb in elements), C fp32. beta 0 or 1
// (every product of the step; alpha finite and nonzero) run oneDNN's bf16 matmul (alpha as its
// output scale, applied to the fp32 sums); other scalars, or a product oneDNN refuses, widen A
// and B to fp32 (exactly) for Gemm<float>. Needs Bf16GemmAvailable() for speed, not for
// correctness.
void GemmBf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
              int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace multiscreen::kernels::cpu
