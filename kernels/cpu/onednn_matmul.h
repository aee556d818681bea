// oneDNN's matmul primitive for the CPU's GEMMs (issue 44): fp32 operands (kernels/cpu/gemm.h's
// avx512 path) or bf16 operands (kernels/cpu/gemm_bf16.h), fp32 C in both, row-major,
// C = op(A) op(B) or C += op(A) op(B). oneDNN picks its kernels from the CPU (brgemm on
// AVX-512; vdpbf16ps on AVX512_BF16, AMX tiles where the CPU has AMX-BF16) and runs on the
// OpenMP runtime the other kernels use (Debian's build links libgomp), so its threads are
// ours. One primitive per shape, operand type and OpenMP thread count (oneDNN plans a product's
// threading when it makes the primitive), made on first use and kept (a step reuses a handful
// of shapes); safe to call from several threads. Each call plans for the team it gets: 1 thread
// inside a parallel region, at most OMP_THREAD_LIMIT, dynamic teams off for the call (planned
// for more threads than its team, oneDNN left the missing threads' shares of C unwritten).
#pragma once

#include <cstdint>

namespace multiscreen::kernels::cpu {

enum class MatmulOperands { kF32, kBf16 };

// oneDNN 2.6 splits the reduction of a product whose A is transposed (a weight gradient, xᵀ·∂y)
// and whose k is at least 2048 over the threads where C has fewer column blocks than there are
// threads (e.g. 1024 × 256 · k = 4096 on 8 threads, 12 × 8 on 2), and its sums then depend on
// the thread count. Such products run as chunks of kOnednnKChunk along k, each added into C in
// order: a product's bits depend on its shape, not on the thread count.
inline constexpr int64_t kOnednnSplitK = 2048;
inline constexpr int64_t kOnednnKChunk = 1024;
// With an output scale (alpha ≠ 1) oneDNN's gemm:jit gave other bits on other thread counts:
// fp32 products overwriting C on 1 thread against 2 or more (every shape tried, the logits'
// 512 × 50,257 · k = 256 among them), bf16 ones with a small C (m·n ≤ kOnednnSmallC: 1 × 1280,
// 64 × 64, 300 × 48 on 2–16 threads). Those, and the chunked products, run unscaled and are
// scaled once after, in one pass over C: C = alpha · (A B) (+ C), the scale rounding once as
// oneDNN's does. Still following the thread count: products with both operands transposed, a
// small C and a long k (64 × 160 · k = 5000 on 8 threads) — none in the training step.
inline constexpr int64_t kOnednnSmallC = int64_t(1) << 20;

// C[m, n] = alpha · op(A) op(B) (+ C where accumulate), row-major as kernels/cpu/gemm.h's Gemm: op(A)
// is [m, k] (A stored [k, m] when trans_a), op(B) [k, n] (B stored [n, k] when trans_b), row
// strides lda, ldb, ldc in elements. a, b: float (kF32) or bf16 bit patterns as uint16_t
// (kBf16); c fp32. k ≥ 1. A transposed with k ≥ kOnednnSplitK: in chunks of kOnednnKChunk;
// alpha as above. False (C untouched) where oneDNN has no CPU engine or refuses the product (a CPU
// without bf16 support, say), or fails running the first (or only) chunk: the caller computes it
// another way. Failing on a later chunk (oneDNN reports resource errors only, while running)
// aborts with one line on stderr: the earlier chunks are in C.
bool OnednnMatmul(MatmulOperands type, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const void* a, int64_t lda, const void* b, int64_t ldb, bool accumulate, float* c, int64_t ldc);

}  // namespace multiscreen::kernels::cpu
