// Elementwise ops and reductions of the CUDA kernel table (kernels/kernel_table.h's
// memory section) on fp32 device arrays: fill, add, batched strided 2-D copy/add, scale,
// rounding to bf16/fp16 (the twin of kernels/cpu/bf16.h), and the fp64 reductions
// Dot, SumSquares and the finiteness check. Every call is enqueued on `stream`; the
// reductions wait for their result. A failing launch is fatal (kernels/cuda/check.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/kernel_table.h"

namespace multiscreen::kernels::cuda {

// dst[i] = value, i < n.
void Fill(float* dst, int64_t n, float value, cudaStream_t stream);

// dst[i] += src[i], i < n.
void AddInto(const float* src, int64_t n, float* dst, cudaStream_t stream);

// dst[i] ← dst[i] · factor, i < n.
void Scale(float* x, int64_t n, float factor, cudaStream_t stream);

// jobs[0, n), n ≤ kMaxCopy2DJobs, each `count` blocks [rows, cols] of its src (block b
// at src + b·src_stride, row stride ld_src) copied into its dst (dst + b·dst_stride, row
// stride ld_dst) when !accumulate, added to it when accumulate: one launch for all
// (kernel_table.h's Copy2DJobs). No destination block overlaps another or any source.
void Copy2DJobs(const Copy2DJob<float>* jobs, int n, bool accumulate, cudaStream_t stream);

// The jobs' elements (Copy2DJobs' with accumulate false) as `precision`'s 16-bit values
// (kBf16 or kFp16, round to nearest even as RoundTo) written into dst16 at the offset each
// destination element has from `base`, instead of into the jobs' dst (not written; every
// job's destination blocks lie inside the array at base): one launch (KernelTable::PackJobsRounded).
void Copy2DJobsRoundPack(Precision precision, const Copy2DJob<float>* jobs, int n, const float* base,
                         uint16_t* dst16, cudaStream_t stream);

// dst ← the elements of src at `count` ranges, one after another: ranges [count, 3]
// device int64s (begin in src, length, offset in dst), one block per range; one launch.
void GatherRanges(const float* src, const int64_t* ranges, int64_t count, float* dst, cudaStream_t stream);

// x[i] ← the value x[i] has in `precision`'s 16-bit format, round to nearest even:
// bf16 bit-for-bit as cpu::FloatToBf16 (NaN stays NaN), fp16 as IEEE half (past
// 65504: ±inf). No-op for kFp32.
void RoundTo(Precision precision, float* x, int64_t n, cudaStream_t stream);

// Doubles of device scratch the reductions below need.
inline constexpr int64_t kReduceScratch = 1025;

// The reductions' device scratch: `sums`, kReduceScratch doubles (the blocks' partial
// sums, then the result at [kReduceScratch − 1]), and `blocks_done`, one unsigned that
// is 0 between calls (the owner zeroes it once; each reduction leaves it 0).
struct ReduceScratch {
  double* sums = nullptr;
  unsigned* blocks_done = nullptr;
};

// Σ_i a_i·b_i in fp64 (products exact in fp64). Deterministic: a fixed grid of
// per-thread strided sums and block trees, set by n alone; the last block to finish sums
// the blocks' partials in index order (a strided sum per thread, then its block tree),
// whichever block that is: one launch. Waits for the result.
double Dot(const float* a, const float* b, int64_t n, ReduceScratch scratch, cudaStream_t stream);

// dst[0] += float(Dot(a, b, n)), on the device: the same launch, its last block adding
// the fp64 sum (rounded to fp32) into dst; nothing waits.
void DotAddInto(const float* a, const float* b, int64_t n, float* dst, ReduceScratch scratch, cudaStream_t stream);

// Σ_i x_i² in fp64, as Dot(x, x).
double SumSquares(const float* x, int64_t n, ReduceScratch scratch, cudaStream_t stream);

// Whether every x_i is finite (counts the others, as Dot does its sum).
bool AllFinite(const float* x, int64_t n, ReduceScratch scratch, cudaStream_t stream);

}  // namespace multiscreen::kernels::cuda
