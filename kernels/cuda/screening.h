// Screening (spec steps 5–13) on a CUDA device: the twin of kernels/cpu/screening.h's
// ScreeningForward and ScreeningBackward, same layouts (kernels/screening_types.h),
// fp32 with fp64 angles (MiPE) and fp64 sums of the tile-scalar gradients. A first,
// straightforward version, one thread per (sequence, tile, token):
//   forward:  normalize (+ MiPE) every row of q, k, v into `saved`; then each query
//             walks the ⌈w⌉ keys its Softmask reaches, skipping the value work of pairs
//             Trim rejects, and writes h (saved) and U.
//   backward: a query pass (output, gate and TanhNorm backward to ∂L/∂h, kept in
//             scratch; relevance recomputed over the window; ∂L/∂q̃ finished into dP;
//             per-query partials of the w, r and scale gradients), a key pass (each key
//             j gathers from its queries j … j + ⌈w⌉ − 1 in ascending order: ∂L/∂k̃,
//             ∂L/∂v̄ finished into dP), and a fixed-order fp64 reduction of the partials
//             per (sequence, tile), summed over sequences on the host in order. No atomics.
// d_K = 16, d_V = 64 are compiled as constants; other widths (2 ≤ d_k ≤ 64,
// 1 ≤ d_v ≤ 256) take a generic path. A failing launch or a shape outside those
// bounds is fatal (kernels/cuda/check.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/device_array.h"
#include "kernels/screening_types.h"

namespace multiscreen::kernels::cuda {

// One tile's scalars as the kernels read them (from TileScalars, per call).
struct ScreeningTileParams {
  float w = 1;       // window (+inf: plain causal mask)
  float r = 1;       // acceptance width
  float scale = 1;   // e^{s_O}
  double rate = 0;   // MiPE angle per position, π γ(w)/w (0: no rotation)
  int64_t keys = 1;  // keys the Softmask reaches: min(⌈w⌉, T)
};

// Device scratch of the screening kernels, sized by the first call and kept
// (one per kernel table; not shared by calls running at the same time).
struct ScreeningScratch {
  DeviceArray<ScreeningTileParams> params{Device::kCuda};  // [tiles]
  DeviceArray<float> mask{Device::kCuda}, dmask{Device::kCuda};  // [tiles, mask_ld]: m(d), ∂m/∂w(d)
  DeviceArray<float> dh{Device::kCuda};                     // [B, tiles, T, d_v]: ∂L/∂h
  DeviceArray<double> partial{Device::kCuda};               // [B, tiles, T, 5] per-token gradient parts
  DeviceArray<double> sums{Device::kCuda};                  // [B, tiles, 5]
  std::vector<ScreeningTileParams> host_params;
  std::vector<float> host_mask, host_dmask;
  std::vector<double> host_rate_dw, host_sums;
  int64_t mask_ld = 1;
};

// Forward. P: [B·T, tiles·p_cols()] device, read. tiles: [tiles] host. U: [B·T,
// tiles·d_v] device, written, U = scale · TanhNorm(h) ⊙ tanh(SiLU(g)). Every buffer
// of `saved` (device) is written, as the CPU's forward writes them.
void ScreeningForward(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                      const ScreeningSaved<float>& saved, float* U, ScreeningScratch* scratch, cudaStream_t stream);

// Spec steps 5–6 alone, the first of ScreeningForward's two passes: saved's q̃, k̃
// (MiPE-rotated), v̄ and their norms from P, and the tile tables uploaded into scratch
// (params, mask, dmask) for a pass that reads them next (the tiled forward).
void ScreeningNormalize(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                        const ScreeningSaved<float>& saved, ScreeningScratch* scratch, cudaStream_t stream);

// Backward. dU: [B·T, tiles·d_v] device, read; dP: [B·T, tiles·p_cols()] device,
// written (q, k, v and g columns). grads: [tiles] host, receives (=, not +=) each
// tile's gradients with respect to w (through Softmask and MiPE), r and scale, summed
// in fp64 in a fixed order. Waits for the gradients.
void ScreeningBackward(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                       const ScreeningSaved<float>& saved, const float* dU, float* dP, TileScalarGrads* grads,
                       ScreeningScratch* scratch, cudaStream_t stream);

}  // namespace multiscreen::kernels::cuda
