// One AdamW update over a contiguous range (kernels::AdamWArgs; torch.optim.AdamW's
// single-tensor arithmetic, as trainer/adamw.h states it): decoupled weight decay
// p ← p·(1 − lr·λ) where decay[i] ≠ 0, moments m ← β1 m + (1 − β1) g,
// v ← β2 v + (1 − β2) g², then p ← p − (lr/(1 − β1^t)) · m / (√v/√(1 − β2^t) + ε).
// Memory-bound (28 bytes per fp32 parameter): one vectorized, threaded pass.
#pragma once

#include <cstdint>

#include "kernels/kernel_table.h"

namespace multiscreen::kernels::cpu {

// params, m, v [n] updated in place from grads [n]; args.decay: host, [n] or null.
template <typename Real>
void AdamWUpdate(const AdamWArgs& args, Real* params, const Real* grads, Real* m, Real* v, int64_t n);

}  // namespace multiscreen::kernels::cpu
