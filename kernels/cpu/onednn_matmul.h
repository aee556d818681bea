// oneDNN's matmul primitive for the CPU's GEMMs (issue 44): fp32 operands (kernels/cpu/gemm.h's
// avx512 path) or bf16 operands (kernels/cpu/gemm_bf16.h), fp32 C in both, row-major,
// C = op(A) op(B) or C += op(A) op(B). oneDNN picks its kernels from the CPU (brgemm on
// AVX-512; vdpbf16ps on AVX512_BF16, AMX tiles where the CPU has AMX-BF16) and runs on the
// OpenMP runtime the other kernels use (Debian's build links libgomp), so its threads are
// ours. One primitive per shape and operand type, made on first use and kept (a step reuses a
// handful of shapes); safe to call from several threads.
#pragma once

#include <cstdint>

namespace multiscreen::kernels::cpu {

enum class MatmulOperands { kF32, kBf16 };

// C[m, n] = alpha · op(A) op(B) (+ C where accumulate), row-major as kernels/cpu/gemm.h's Gemm: op(A)
// is [m, k] (A stored [k, m] when trans_a), op(B) [k, n] (B stored [n, k] when trans_b), row
// strides lda, ldb, ldc in elements. a, b: float (kF32) or bf16 bit patterns as uint16_t
// (kBf16); c fp32. k ≥ 1. False (C untouched) where oneDNN has no CPU engine or refuses the
// product (a CPU without bf16 support, say): the caller computes it another way.
bool OnednnMatmul(MatmulOperands type, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const void* a, int64_t lda, const void* b, int64_t ldb, bool accumulate, float* c, int64_t ldc);

}  // namespace multiscreen::kernels::cpu
