// AdamW on a CUDA device: one fused elementwise pass with exactly trainer/adamw.cc's
// fp32 arithmetic (torch.optim.AdamW): the step constants are computed on the host in
// fp64 and cast to fp32 as the CPU does, and the device rounds every fp32 operation
// separately (no fused multiply-adds), so that both give the same bits.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/kernel_table.h"

namespace multiscreen::kernels::cuda {

// One update of params [n] from grads [n] with moments m, v [n] (all device; args.decay
// device or null) at step args.step ≥ 1:
//   p ← p·(1 − lr·λ) where decay applies; m ← β1 m + (1 − β1) g; v ← β2 v + (1 − β2) g²;
//   p ← p − (lr/(1 − β1^t)) · m / (√v / √(1 − β2^t) + ε).
void AdamW(const AdamWArgs& args, float* params, const float* grads, float* m, float* v, int64_t n,
           cudaStream_t stream);

}  // namespace multiscreen::kernels::cuda
