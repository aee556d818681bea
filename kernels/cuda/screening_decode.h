// Screening's decoding cache on a CUDA device (kernels/decode_cache.h), the twin of
// kernels/cpu/screening_cache.h (CpuScreeningCache): per unit a device ring buffer of its
// last ⌈w⌉ k̃ and v̄ (a finite window) or every one (w = ∞), each grown by doubling as
// tokens come; the Softmask table m(d), MiPE rate and RoPE frequencies made on the host by
// the CPU's own functions (as screening_tables.h) and uploaded once. Each token is two
// launches per layer:
//   ScreenDecodeKernel, a block per (unit, block of `keys_per_block` cached keys, walked
//     by distance d = pos − j): normalizes and turns q (and, in the block of d = 0, the
//     new k and v, written into their slot), then each thread scores one key (Trim² ·
//     m(d), fp32 as the CPU's ScreenOneQuery) and the block sums the accepted keys' v̄
//     (rejected ones skip the value work) into a partial aggregate;
//   ScreenDecodeOutputKernel, a block per unit: h = the partials summed in block order
//     (no atomics: the same bits every run), then TanhNorm, the gate and e^{s_O} (steps
//     11–13) into U.
// A prompt chunk's rows (StepRows) take three launches per kDecodeRows rows instead of two
// per row: ScreenDecodeKeysKernel caches every row's k̃ and v̄ first, then the two kernels
// above over (unit, key block, row), each row's query reading only the keys up to its own
// position — the same operations as row by row, so the same bits. For that a finite
// window's ring holds ⌈w⌉ + kDecodeRows − 1 slots, so that the chunk's new keys never
// overwrite one that its first row still reads.
// 2 ≤ d_K ≤ 64, 1 ≤ d_V ≤ 256 (others refused by the factory).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/decode_cache.h"

namespace multiscreen::kernels::cuda {

// Cached keys a block of ScreenDecodeKernel takes: a unit of n keys is ⌈n / this⌉ blocks.
inline constexpr int64_t kDecodeKeysPerBlock = 1024;

// One unit as the kernels read it (device array, rewritten when a buffer grows).
struct ScreenDecodeUnit {
  float* k = nullptr;            // [slots, d_k]: k̃ of position p in slot p mod ring (p for cap = 0)
  float* v = nullptr;            // [slots, d_v]: v̄, likewise
  const float* mask = nullptr;   // [cap]: m(d); null for w = ∞
  int64_t cap = 0;               // keys in the window, ⌈w⌉; 0: unbounded (w = ∞)
  int64_t ring = 0;              // ring slots, cap + kDecodeRows − 1 (a finite window's); slot = position mod ring
  float r = 1, scale = 1;        // σ(s_r), e^{s_O}
  double rate = 0;               // MiPE angle per position (0: none)
};

// The sizes and switches every launch reads.
struct ScreenDecodeDims {
  int64_t tiles = 0, p_cols = 0, keys_per_block = kDecodeKeysPerBlock, blocks = 1;  // blocks: per unit
  int d_k = 0, d_v = 0;
  bool tanh_norm = true, gate = true;
  const double* rope_freq = nullptr;  // position ROPE: [d_k/2] θ'_p (device); null otherwise
};

// The launches of `rows` tokens (1 ≤ rows ≤ kDecodeRows) at positions pos0 …: P [rows,
// ldp] (each row [tiles · p_cols]) read; each unit's slots of those positions written;
// partial [rows, tiles, blocks, d_v] scratch (dims.blocks for the last row's keys); U
// [rows, ldu] written. One row: two launches (the key cached by the screening kernel);
// more: three.
void ScreenDecodeRows(const ScreenDecodeDims& dims, const float* P, int64_t ldp, int64_t rows,
                      const ScreenDecodeUnit* units, int64_t pos0, float* partial, float* U, int64_t ldu,
                      cudaStream_t stream);

// The cache of one layer's units (kernels::ScreeningCache<float>). keys_per_block: the
// split of ScreenDecodeKernel (tests take a small one to cross blocks). Error (one line):
// a width outside the kernels' bounds.
absl::StatusOr<std::unique_ptr<ScreeningCache<float>>> MakeCudaScreeningCache(
    const ScreeningShape& shape, const std::vector<TileScalars>& tiles, int64_t keys_per_block = kDecodeKeysPerBlock);

}  // namespace multiscreen::kernels::cuda
