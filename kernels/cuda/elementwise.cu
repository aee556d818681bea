// Elementwise ops and fp64 reductions of the CUDA kernel table (elementwise.h):
// grid-stride loops of kThreads-thread blocks; reductions in one launch, in a fixed order.
#include "kernels/cuda/elementwise.h"

#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.h"

namespace multiscreen::kernels::cuda {
namespace {

// Most blocks of the first reduction pass (one partial sum each).
constexpr int kReduceBlocks = int(kReduceScratch) - 1;

__global__ void FillKernel(float* dst, int64_t n, float value) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    dst[i] = value;
  }
}

__global__ void AddIntoKernel(const float* src, int64_t n, float* dst) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    dst[i] += src[i];
  }
}

__global__ void ScaleKernel(float* x, int64_t n, float factor) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    x[i] *= factor;
  }
}

// Copy2DJobs' jobs, passed by value: end[j] is the elements of jobs [0, j] together.
struct Copy2DJobList {
  Copy2DJob<float> job[kMaxCopy2DJobs];
  int64_t end[kMaxCopy2DJobs];
  int n;
};

// One grid-stride walk over the elements of all jobs, job-major, then as each job's
// Copy2DBatched: block-major, row-major within a block: put(x, at) for each source
// element x and the destination element `at` it is bound for.
template <typename Put>
__device__ inline void ForEachCopy2DElement(const Copy2DJobList& list, Put put) {
  const int64_t n = list.end[list.n - 1];
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int j = 0;
    while (i >= list.end[j]) ++j;
    const Copy2DJob<float>& job = list.job[j];
    const int64_t e = i - (j > 0 ? list.end[j - 1] : 0), block = job.rows * job.cols;
    const int64_t b = e / block, k = e - b * block;
    const int64_t r = k / job.cols, c = k - r * job.cols;
    put(job.src[b * job.src_stride + r * job.ld_src + c], job.dst + b * job.dst_stride + r * job.ld_dst + c);
  }
}

// Copy2DJobs: each element written into dst, or added to it when kAccumulate.
template <bool kAccumulate>
__global__ void Copy2DJobsKernel(Copy2DJobList list) {
  ForEachCopy2DElement(list, [](float x, float* at) {
    if constexpr (kAccumulate) {
      *at += x;
    } else {
      *at = x;
    }
  });
}

// Copy2DJobsRoundPack: each element's 16-bit value written into dst16 at the offset its
// destination has from `base` (the jobs' dst itself is not written).
template <typename Half>
__global__ void Copy2DJobsRoundPackKernel(Copy2DJobList list, const float* base, Half* dst16) {
  ForEachCopy2DElement(list, [=](float x, float* at) { StoreHalf(x, dst16 + (at - base)); });
}

// Block i copies range i: src[ranges[i, 0] + j] → dst[ranges[i, 2] + j], j < ranges[i, 1].
__global__ void GatherRangesKernel(const float* src, const int64_t* ranges, float* dst) {
  const int64_t* range = ranges + int64_t(blockIdx.x) * 3;
  for (int64_t j = threadIdx.x; j < range[1]; j += blockDim.x) dst[range[2] + j] = src[range[0] + j];
}

// cpu::FloatToBf16 then cpu::Bf16ToFloat, bit for bit.
__device__ inline float RoundBf16(float x) {
  uint32_t bits = __float_as_uint(x);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return __uint_as_float(((bits >> 16) | 0x40u) << 16);
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return __uint_as_float((bits >> 16) << 16);
}

__global__ void RoundKernel(float* x, int64_t n, bool bf16) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    x[i] = bf16 ? RoundBf16(x[i]) : __half2float(__float2half_rn(x[i]));
  }
}

// The terms the reductions sum, one per index.
struct DotTerm {
  const float* a;
  const float* b;
  __device__ double operator()(int64_t i) const { return double(a[i]) * double(b[i]); }
};
struct NonFiniteTerm {
  const float* x;
  __device__ double operator()(int64_t i) const { return isfinite(x[i]) ? 0.0 : 1.0; }
};


// One launch: block b writes its terms' sum (each thread summing its strided share in
// order, then the block tree) to sums[b]; the last block to finish, counted in
// *blocks_done (reset to 0 by it), sums sums[0, gridDim.x) — each thread its strided share
// in index order, then the block tree — into sums[kReduceBlocks] and, with add_to, adds
// it there as fp32. The order of that final sum is fixed whichever block comes last, so
// the result is set by n alone (it is what a second one-block pass over the partials
// gave).
template <typename Term>
__global__ void ReduceKernel(Term term, int64_t n, ReduceScratch scratch, float* add_to) {
  double sum = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    sum += term(i);
  }
  sum = BlockSum(sum);
  __shared__ bool last;
  if (threadIdx.x == 0) {
    scratch.sums[blockIdx.x] = sum;
    __threadfence();  // the partial is visible device-wide before the count says so
    last = atomicAdd(scratch.blocks_done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();  // every other block's partial is read after its count
  double total = 0;
  const volatile double* sums = scratch.sums;
  for (unsigned i = threadIdx.x; i < gridDim.x; i += blockDim.x) total += sums[i];
  total = BlockSum(total);
  if (threadIdx.x == 0) {
    scratch.sums[kReduceBlocks] = total;
    if (add_to != nullptr) *add_to += static_cast<float>(total);
    *scratch.blocks_done = 0;
  }
}

// The reduction into scratch.sums[kReduceBlocks] (and, with add_to, added there); n > 0.
template <typename Term>
void LaunchReduce(const char* op, Term term, int64_t n, ReduceScratch scratch, float* add_to, cudaStream_t stream) {
  const int blocks = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, kReduceBlocks));
  Launch<ReduceKernel<Term>>(blocks, kThreads, 0, stream, term, n, scratch, add_to);
  MS_CUDA_CHECK_LAUNCH(op);
}

template <typename Term>
double Reduce(const char* op, Term term, int64_t n, ReduceScratch scratch, cudaStream_t stream) {
  if (n <= 0) return 0;
  LaunchReduce(op, term, n, scratch, static_cast<float*>(nullptr), stream);
  double result = 0;
  MS_CUDA_CHECK(op, cudaMemcpyAsync(&result, scratch.sums + kReduceBlocks, sizeof(double), cudaMemcpyDeviceToHost,
                                    stream));
  MS_CUDA_CHECK(op, cudaStreamSynchronize(stream));
  return result;
}

}  // namespace

void Fill(float* dst, int64_t n, float value, cudaStream_t stream) {
  if (n <= 0) return;
  Launch<FillKernel>(BlocksFor(n), kThreads, 0, stream, dst, n, value);
  MS_CUDA_CHECK_LAUNCH("Fill");
}

void AddInto(const float* src, int64_t n, float* dst, cudaStream_t stream) {
  if (n <= 0) return;
  Launch<AddIntoKernel>(BlocksFor(n), kThreads, 0, stream, src, n, dst);
  MS_CUDA_CHECK_LAUNCH("AddInto");
}

void Scale(float* x, int64_t n, float factor, cudaStream_t stream) {
  if (n <= 0) return;
  Launch<ScaleKernel>(BlocksFor(n), kThreads, 0, stream, x, n, factor);
  MS_CUDA_CHECK_LAUNCH("Scale");
}

namespace {

// The jobs with elements, in a list for one launch; their elements together.
int64_t ListCopy2DJobs(const Copy2DJob<float>* jobs, int n, Copy2DJobList* list) {
  CheckCopy2DJobs(n);
  int64_t total = 0;
  for (int j = 0; j < n; ++j) {
    const Copy2DJob<float>& job = jobs[j];
    if (job.rows <= 0 || job.cols <= 0 || job.count <= 0) continue;  // nothing to copy: left out
    list->job[list->n] = job;
    total += job.rows * job.cols * job.count;
    list->end[list->n++] = total;
  }
  return total;
}

}  // namespace

void Copy2DJobs(const Copy2DJob<float>* jobs, int n, bool accumulate, cudaStream_t stream) {
  Copy2DJobList list{};
  const int64_t total = ListCopy2DJobs(jobs, n, &list);
  if (total <= 0) return;
  if (accumulate) {
    Launch<Copy2DJobsKernel<true>>(BlocksFor(total), kThreads, 0, stream, list);
  } else {
    Launch<Copy2DJobsKernel<false>>(BlocksFor(total), kThreads, 0, stream, list);
  }
  MS_CUDA_CHECK_LAUNCH(accumulate ? "Add2DBatched" : "Copy2DBatched");
}

void Copy2DJobsRoundPack(Precision precision, const Copy2DJob<float>* jobs, int n, const float* base,
                         uint16_t* dst16, cudaStream_t stream) {
  Copy2DJobList list{};
  const int64_t total = ListCopy2DJobs(jobs, n, &list);
  if (total <= 0) return;
  if (precision == Precision::kBf16) {
    Launch<Copy2DJobsRoundPackKernel<__nv_bfloat16>>(BlocksFor(total), kThreads, 0, stream, list, base,
                                                     reinterpret_cast<__nv_bfloat16*>(dst16));
  } else {
    Launch<Copy2DJobsRoundPackKernel<__half>>(BlocksFor(total), kThreads, 0, stream, list, base,
                                              reinterpret_cast<__half*>(dst16));
  }
  MS_CUDA_CHECK_LAUNCH("PackJobsRounded");
}

void GatherRanges(const float* src, const int64_t* ranges, int64_t count, float* dst, cudaStream_t stream) {
  if (count <= 0) return;
  Launch<GatherRangesKernel>(static_cast<unsigned>(count), kThreads, 0, stream, src, ranges, dst);
  MS_CUDA_CHECK_LAUNCH("DownloadRanges");
}

void RoundTo(Precision precision, float* x, int64_t n, cudaStream_t stream) {
  if (precision == Precision::kFp32 || n <= 0) return;
  Launch<RoundKernel>(BlocksFor(n), kThreads, 0, stream, x, n, precision == Precision::kBf16);
  MS_CUDA_CHECK_LAUNCH("RoundTo");
}

double Dot(const float* a, const float* b, int64_t n, ReduceScratch scratch, cudaStream_t stream) {
  return Reduce("Dot", DotTerm{a, b}, n, scratch, stream);
}

void DotAddInto(const float* a, const float* b, int64_t n, float* dst, ReduceScratch scratch, cudaStream_t stream) {
  if (n > 0) LaunchReduce("DotAddInto", DotTerm{a, b}, n, scratch, dst, stream);
}

double SumSquares(const float* x, int64_t n, ReduceScratch scratch, cudaStream_t stream) {
  return Reduce("SumSquares", DotTerm{x, x}, n, scratch, stream);
}

bool AllFinite(const float* x, int64_t n, ReduceScratch scratch, cudaStream_t stream) {
  return Reduce("AllFinite", NonFiniteTerm{x}, n, scratch, stream) == 0;
}

}  // namespace multiscreen::kernels::cuda
