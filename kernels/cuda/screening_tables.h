// The host half of the CUDA screening kernels (kernels/cuda/screening.h): each tile's
// mapped scalars, MiPE rate and Softmask tables and the device reduction's chain-rule
// factors, made with the CPU kernel's own functions (kernels/cpu/softmask.h,
// kernels/cpu/mipe.h) so that both devices use the same numbers. A C++ file, not CUDA:
// those headers are C++20 (this header is C++17, for nvcc).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/screening_types.h"

namespace multiscreen::kernels::cuda {

// One tile's scalars as the kernels read them (from TileScalars).
struct ScreeningTileParams {
  float w = 1;       // window (+inf: plain causal mask)
  float r = 1;       // acceptance width
  float scale = 1;   // e^{s_O}
  double rate = 0;   // MiPE angle per position, π γ(w)/w (0: no rotation)
  int64_t keys = 1;  // keys the Softmask reaches: min(⌈w⌉, T)
};

// Per tile, the factors the device reduction (TileScalarParamGradsKernel,
// screening.cu) multiplies the sums by (host values of TileScalarParamGrads's operands,
// screening_types.h): ∂rate/∂w, w − 1, whether w = ∞, r, 1 − r, scale.
enum ScreeningChain : int {
  kChainRateDw,
  kChainWMinus1,
  kChainInfiniteW,
  kChainR,
  kChainOneMinusR,
  kChainScale,
  kChain
};

// The tables of one (shape, tiles) on the host.
struct ScreeningHostTables {
  std::vector<ScreeningTileParams> params;  // [tiles]
  std::vector<double> rate_dw;              // [tiles] dc/dw of the MiPE rate (0 unless MIPE)
  int64_t mask_ld = 1;                      // the most keys of any tile, ≥ 1
  std::vector<float> mask, dmask;           // [tiles, mask_ld]: m(d), ∂m/∂w(d) at d < keys, zero beyond
  std::vector<double> chain;                // [tiles, kChain]
  std::vector<double> rope_freq;            // position ROPE: [d_k/2] θ'_p; empty for MIPE and NOPE
};

// Fills `out` for `tiles` [shape.tiles] (host). Reads shape.tiles, seq, d_k, w_th,
// position and, for position ROPE, rope_scaling, and nothing else (ScreeningTableKey,
// screening_table_cache.h, lists the same): NOPE and ROPE zero the MiPE rates and
// rate_dw; ROPE's rope_freq is cpu::RopeFrequencies with shape.rope_scaling (YaRN's θ'_p
// at inference).
void FillScreeningTables(const ScreeningShape& shape, const TileScalars* tiles, ScreeningHostTables* out);

}  // namespace multiscreen::kernels::cuda
