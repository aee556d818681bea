// Softmax cross-entropy on a CUDA device (spec step 15): the twins of
// kernels/cpu/cross_entropy.h's SoftmaxStats and CrossEntropyGrad, the target-logit
// gather, and the fused single-rank head of kernels/kernel_table.h's HeadLossArgs
// (spec steps 14–15 after PLNorm). Per-row statistics and targets are host arrays,
// copied in and out here (targets and lse uploaded from the table's pinned staging);
// functions that return statistics wait for them, except the head when its caller keeps
// none: then its mean loss stays in a device sum (HeadLoss, TakeHeadLoss). One block
// per row: row max in fp32 (NaNs skipped, as the CPU's), Σ exp in fp64 over fp32
// exponentials, both as fixed-order block trees. Failures are fatal (check.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/gemm.h"
#include "kernels/cuda/mirrored_upload.h"
#include "kernels/cuda/pinned_staging.h"
#include "kernels/device_array.h"
#include "kernels/kernel_table.h"

namespace multiscreen::kernels::cuda {

// Device and host staging memory of the cross-entropy kernels, grown and kept.
struct CrossEntropyScratch {
  DeviceArray<double> first{Device::kCuda}, second{Device::kCuda};  // [rows] statistics
  MirroredUpload<int64_t> target;  // [rows], not copied again while the same (mirrored_upload.h)
  // The head's fp32 logits: [chunk, V]; under fp32 with a backward the gradient rows of a
  // ∂Z group, [group, V], each chunk's logits computed in place within it (HeadTiling).
  DeviceArray<float> logits{Device::kCuda};
  // The head's 16-bit operands: y [rows, d_e], Ē [V, d_e] (where not packed by the
  // caller) and the gradient rows of a ∂Z group [group, V], each converted once.
  DeviceArray<uint16_t> y16{Device::kCuda}, e_bar16{Device::kCuda}, grad16{Device::kCuda};
  std::vector<double> host;                                         // [rows] staging
  // HeadLoss's loss sum when its caller keeps no statistics (TakeHeadLoss): zeroed on
  // the device when made and by each take, so every HeadLoss adds to it with the same
  // launch (a replayed graph's loss node is the same on every micro-batch; issue 42).
  // Empty until the first such HeadLoss.
  DeviceArray<double> loss_sum{Device::kCuda};
  PinnedStaging loss_read;  // the sum as read back: one pinned double
};

// Rows of logits the fused head computes at a time ([kHeadChunkRows, V] fp32 scratch).
inline constexpr int64_t kHeadChunkRows = 512;
// The budget of the head's ∂Z buffer: the gradient rows [group, V] it keeps between its
// row passes and its two backward products (2 bytes an element under bf16 and fp16, 4
// under fp32). 512 MiB holds a whole micro-batch of 4,096 rows at V = 50,257 in bf16
// (412 MB, Ψ = 32's T = 4096, B = 1); a bigger call runs in groups.
inline constexpr int64_t kHeadGroupBytes = int64_t{512} << 20;

// How the fused head splits its rows: logits in chunks of chunk_rows, and the backward's
// products once per group of whole chunks whose gradient rows fit group_bytes (at least
// one chunk a group, however small the budget). Tests shrink both to cross the bounds.
struct HeadTiling {
  int64_t chunk_rows = kHeadChunkRows;
  int64_t group_bytes = kHeadGroupBytes;
};

// Rows of each ∂Z group but the last (which holds what remains): the most whole chunks
// of `tiling` whose [group, V] gradient rows of elem_bytes each fit tiling.group_bytes,
// at least one chunk, at most rows. rows, V > 0.
int64_t HeadGroupRows(int64_t rows, int64_t V, int64_t elem_bytes, const HeadTiling& tiling);

// Per row r of z [rows, V] (device, row stride ld): row_max[r] = max_v z[r, v] and
// row_sum[r] = Σ_v exp(z[r, v] − row_max[r]) (host arrays, written).
void SoftmaxStats(const float* z, int64_t ld, int64_t rows, int64_t V, double* row_max, double* row_sum,
                  CrossEntropyScratch* scratch, cudaStream_t stream);

// out[r] = z[r, target[r]] where target[r] ≥ 0 (others untouched). target, out: host [rows].
void TargetLogits(const float* z, int64_t ld, int64_t rows, const int64_t* target, double* out,
                  CrossEntropyScratch* scratch, PinnedStaging* staging, cudaStream_t stream);

// In place: z[r, v] ← exp(z[r, v] − lse[r]) · coef − [v == target[r]] · coef.
// lse, target: host [rows] (target −1: in another shard).
void CrossEntropyGrad(float* z, int64_t ld, int64_t rows, int64_t V, const double* lse, const int64_t* target,
                      float coef, CrossEntropyScratch* scratch, PinnedStaging* staging, cudaStream_t stream);

// The fused single-rank head (HeadLossArgs), in chunks of tiling.chunk_rows rows:
// z = scale · y Ēᵀ (fp32 GEMM into scratch), lse and target logits (row max or the
// fixed shift, fp64 sums) kept on the device [rows] — the gradient rows read them there —
// and copied to the host where args.lse is given (then it waits, once), else their
// HeadMeanLoss added to scratch->loss_sum by one kernel, no wait; with args.dy the gradient
// ∂z ← coef · scale · (softmax − onehot) of every chunk kept in a ∂Z group
// (HeadGroupRows), then per group dy = ∂Z Ē and d_e_bar += ∂Zᵀ Y, one product each
// (fp32 accumulation over the group's rows): the fp32 d_e_bar [V, d_e] is read and
// written once per group — once per call while rows·V fits tiling.group_bytes — where
// a product per chunk read and wrote it once per chunk. Under a 16-bit precision every
// product reads 16-bit operands converted once: y for all rows, Ē (args.e_bar_packed
// where given, else once per call), and the gradient rows, which the row pass writes in
// 16 bits as it computes them (no conversion pass). args.target is uploaded from
// `staging` (pinned).
void HeadLoss(const HeadLossArgs<float>& args, GemmRunner* gemm, CrossEntropyScratch* scratch, PinnedStaging* staging,
              cudaStream_t stream, const HeadTiling& tiling = {});

// KernelTable::TakeHeadLoss: the loss sum HeadLoss kept since the last take (0 if none),
// read into pinned memory with one wait for `stream`, then zeroed on the device
// (cudaMemsetAsync, no wait); before the first HeadLoss that kept its loss, 0 with no wait.
double TakeHeadLoss(CrossEntropyScratch* scratch, cudaStream_t stream);

}  // namespace multiscreen::kernels::cuda
