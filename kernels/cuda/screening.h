// Screening (spec steps 5–13) on a CUDA device: the twin of kernels/cpu/screening.h's
// ScreeningForward and ScreeningBackward, same layouts (kernels/screening_types.h),
// fp32 with fp64 angles (MiPE) and fp64 sums of the tile-scalar gradients. A first,
// straightforward version, one thread per (sequence, tile, token):
//   forward:  normalize (+ MiPE) every row of q, k, v into `saved`; then each query
//             walks the ⌈w⌉ keys its Softmask reaches, skipping the value work of pairs
//             Trim rejects, and writes h (saved) and U.
//   backward: an output pass (output, gate and TanhNorm backward to ∂L/∂h, kept in
//             scratch; the scale gradient's per-token parts), a query pass (relevance
//             recomputed over the window; ∂L/∂q̃ finished into dP; per-query partials
//             of the w and r gradients), a key pass (each key
//             j gathers from its queries j … j + ⌈w⌉ − 1 in ascending order: ∂L/∂k̃,
//             ∂L/∂v̄ finished into dP), and a fixed-order fp64 reduction of the partials
//             per (sequence, tile), summed over sequences on the host in order. No atomics.
// Issue 30's ablation switches (ScreeningShape::position, output_gate; docs/ablations.md)
// as on the CPU: NOPE zeroes the MiPE rates; ROPE turns every pair (p, p + d_K/2) of q̃, k̃ in
// the normalize pass and turns ∂L/∂q, ∂L/∂k back after the unit-norm backward (a rotation
// keeps dot products, so the two commute), by the CPU's frequencies made on the host and
// uploaded once per distinct tables (screening_table_cache.h; YaRN's with
// ScreeningShape::rope_scaling); without
// the gate P has no g columns.
// d_K = 16, d_V = 64 are compiled as constants; other widths (2 ≤ d_k ≤ 64,
// 1 ≤ d_v ≤ 256) take a generic path. A failing launch or a shape outside those
// bounds is fatal (kernels/cuda/check.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/screening_table_cache.h"
#include "kernels/device_array.h"
#include "kernels/screening_types.h"

namespace multiscreen::kernels::cuda {

// The per-token parts of the tile-scalar gradients in ScreeningScratch::partial
// ([B, tiles, T, kScreeningParts]), summed per (sequence, tile) by the backward's last pass.
enum ScreeningPart : int {
  kScreeningPartScale,  // ∂L/∂scale
  kScreeningPartR,      // ∂L/∂r
  kScreeningPartW,      // ∂L/∂w through Softmask
  kScreeningPartRate,   // ∂L/∂rate (MiPE): the query's pairs, Σ_j ∂L/∂s_ij (i − j)(q̃_i × k̃_j)
  kScreeningParts
};

// Device scratch of the screening kernels, sized by the first call and kept
// (one per kernel table; not shared by calls running at the same time), and the tile
// tables: `tables` keeps them on the device per distinct content (screening_table_cache.h)
// and every call that takes `tiles` points `current` at its entry.
struct ScreeningScratch {
  ScreeningTableCache tables;
  const ScreeningTables* current = nullptr;  // this call's tables (params, mask, dmask, chain, rope_freq)
  DeviceArray<float> dh{Device::kCuda};                     // [B, tiles, T, d_v]: ∂L/∂h
  DeviceArray<double> partial{Device::kCuda};               // [B, tiles, T, kScreeningParts] per-token gradient parts
  DeviceArray<double> sums{Device::kCuda};                  // [B, tiles, kScreeningParts]
  // ∂L/∂q̃, ∂L/∂k̃ [B, tiles, T, d_k] and ∂L/∂v̄ [B, tiles, T, d_v], as the tiled backward's
  // five-launch form leaves them for ScreeningBackwardFinish (sized by that backward; unused
  // by the simple one and by the tiled one, whose epilogues finish the rows themselves).
  DeviceArray<float> d_q{Device::kCuda}, d_k{Device::kCuda}, d_v{Device::kCuda};
  std::vector<double> host_sums;
};

// Where a backward's tile-scalar gradients go. On the host (`grads`, from a
// TileScalarGrads* as the tests pass it): each tile's ∂L/∂w (through Softmask and MiPE),
// ∂L/∂r and ∂L/∂scale, written (=), and the backward waits for them. On the device
// (g_sw, g_sr, g_so; g_so may be null): TileScalarParamGrads (screening_types.h) of
// those, ∂L/∂s_w, ∂L/∂s_r, ∂L/∂s_O, added (+=) bit for bit as the host would add them,
// and nothing waits.
struct TileScalarGradsOut {
  TileScalarGradsOut(TileScalarGrads* host) : grads(host) {}  // NOLINT(google-explicit-constructor): the host form
  TileScalarGradsOut(float* sw, float* sr, float* so) : g_sw(sw), g_sr(sr), g_so(so) {}
  TileScalarGrads* grads = nullptr;
  float *g_sw = nullptr, *g_sr = nullptr, *g_so = nullptr;
};

// Forward. P: [B·T, tiles·p_cols()] device, read. tiles: [tiles] host. U: [B·T,
// tiles·d_v] device, written, U = scale · TanhNorm(h) ⊙ tanh(SiLU(g)). Every buffer
// of `saved` (device) is written, as the CPU's forward writes them.
void ScreeningForward(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                      const ScreeningSaved<float>& saved, float* U, ScreeningScratch* scratch, cudaStream_t stream);

// Spec steps 5–6 alone, the first of ScreeningForward's two passes: saved's q̃, k̃
// (MiPE-rotated), v̄ and their norms from P, and scratch->current set to the tile tables
// (uploaded on a cache miss) for a pass that reads them next (the tiled forward's
// two-launch form).
void ScreeningNormalize(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                        const ScreeningSaved<float>& saved, ScreeningScratch* scratch, cudaStream_t stream);

// The tile tables alone (the shape checked; scratch->current set, the tables filled and
// uploaded on `stream` on a cache miss), for a forward pass that normalizes its own rows
// (the tiled forward's fused aggregate kernel).
void ScreeningUploadTables(const ScreeningShape& shape, const TileScalars* tiles, ScreeningScratch* scratch,
                           cudaStream_t stream);

// Backward. dU: [B·T, tiles·d_v] device, read; dP: [B·T, tiles·p_cols()] device,
// written (q, k, v and g columns). grads (TileScalarGradsOut): each tile's gradients
// with respect to w (through Softmask and MiPE), r and scale, summed in fp64 in a fixed
// order, on the host (waits) or as the learned scalars' gradients on the device.
void ScreeningBackward(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                       const ScreeningSaved<float>& saved, const float* dU, float* dP, TileScalarGradsOut grads,
                       ScreeningScratch* scratch, cudaStream_t stream);

// The passes of ScreeningBackward around its O(T·w) window part, shared with the tiled
// backward (screening_tiled.h), one thread per (sequence, tile, token) each.
// ScreeningBackwardBegin: host grads zeroed, scratch->current set to the tile tables
// (uploaded on a cache miss; the chain-rule factors with them), scratch dh, partial and
// sums sized, then the output pass (steps 13, 12, 11
// backward): scratch->dh = ∂L/∂h [B, tiles, T, d_v], dP's g columns (written) and the
// scale part of scratch->partial. Arguments as ScreeningBackward's. Returns false, having
// launched nothing, when the shape is empty.
bool ScreeningBackwardBegin(const ScreeningShape& shape, const float* P, const TileScalars* tiles,
                            const ScreeningSaved<float>& saved, const float* dU, float* dP, TileScalarGradsOut grads,
                            ScreeningScratch* scratch, cudaStream_t stream);

// ScreeningBackwardPrepare: ScreeningBackwardBegin without its output pass (host grads
// zeroed, the tables, scratch dh, partial and sums sized), for a backward that runs the
// output pass itself (the tiled query pass's prologue, screening_tiled.h). Returns false
// when the shape is empty.
bool ScreeningBackwardPrepare(const ScreeningShape& shape, const TileScalars* tiles, TileScalarGradsOut grads,
                              ScreeningScratch* scratch, cudaStream_t stream);

// ScreeningBackwardFinish, after Begin and a window pass that wrote scratch->d_q, d_k, d_v
// (complete ∂L/∂q̃, ∂L/∂k̃, ∂L/∂v̄) and the r, w and rate parts of scratch->partial: steps
// 6 and 5 backward (MiPE, the unit norms) into dP's q, k and v columns (written), then
// the fixed-order reduction of the parts into grads, as ScreeningBackward's. The
// window pass sums ∂L/∂rate pair by pair, Σ_ij ∂L/∂s_ij (i − j)(q̃_i[0] k̃_j[1] −
// q̃_i[1] k̃_j[0]), as the simple kernel's query pass does: equal in exact arithmetic to
// per-row sums Σ_i pos_i (q̃_i × ∂L/∂q̃_i) over q̃ plus Σ_j pos_j (…) over k̃, whose two
// halves grow with pos0 and cancel (3.7e-3 off fp64's ∂L/∂w at pos0 = 70000, as the
// simple kernel was). Waits for host gradients.
void ScreeningBackwardFinish(const ScreeningShape& shape, const ScreeningSaved<float>& saved, float* dP,
                             TileScalarGradsOut grads, ScreeningScratch* scratch, cudaStream_t stream);

// ScreeningBackwardReduce, after Begin and a window pass that finished dP's q, k and v
// columns itself and wrote the r, w and rate parts of scratch->partial (the tiled
// backward's epilogues): ScreeningBackwardFinish's fixed-order reduction alone (one
// launch per (sequence, tile), then the host's or the device's sum over the batch).
void ScreeningBackwardReduce(const ScreeningShape& shape, TileScalarGradsOut grads, ScreeningScratch* scratch,
                             cudaStream_t stream);

}  // namespace multiscreen::kernels::cuda
