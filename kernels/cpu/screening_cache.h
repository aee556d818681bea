// Screening's decoding cache on the CPU (spec "Inference"; kernels/decode_cache.h): per
// unit the k̃ (unit length, turned by the position encoding at its absolute position) and
// v̄ of the tokens seen so far; a finite window keeps only its last ⌈w⌉ keys in a ring
// buffer, an infinite one (window expansion) keeps every key. Each new token costs one
// query over the cache (kernels/cpu/screening.h ScreenOneQuery), the same sums as the
// batched forward. ScreeningTileCache is one unit's; CpuScreeningCache a layer's units
// (Multiscreen's tiles, the screening heads of a Transformer), the CPU's
// kernels::ScreeningCache and the oracle of the CUDA one (kernels/cuda/screening_decode.h).
// Any Real, host memory.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/rope.h"
#include "kernels/decode_cache.h"
#include "kernels/screening_types.h"

namespace multiscreen::kernels::cpu {

template <typename Real>
class ScreeningTileCache {
 public:
  // scalars: the unit's mapped w, r, scale, mipe_w (MapTileScalars, with the inference
  // window rule applied); d_k: query/key width, d_v: value width.
  ScreeningTileCache(const TileScalars& scalars, int64_t d_k, int64_t d_v);

  // The token at absolute position `pos` (positions increase by one per call): q, k [d_k]
  // and v [d_v] are its raw projections. Normalizes them (spec step 5), turns q̄ and k̄ by
  // `position` (step 6: MiPE at the rate of mipe_w and w_th, or RoPE with rope_scaling),
  // caches k̃, v̄ and writes h [d_v] = Σ_j Trim(q̃·k̃_j)² m(pos − j) v̄_j over the cached
  // keys, this token's included (steps 7–10).
  void Step(const Real* q, const Real* k, const Real* v, int64_t pos, PositionKind position, double w_th,
            const RopeScaling& rope_scaling, Real* h);

  // Keys held after `steps` calls: min(steps, ⌈w⌉), or steps for w = ∞.
  int64_t CachedKeys(int64_t steps) const;
  const TileScalars& scalars() const { return scalars_; }

 private:
  TileScalars scalars_;
  int64_t d_k_, d_v_;
  int64_t capacity_ = 0;          // ring slots; 0 = unbounded (grows)
  std::vector<Real> k_, v_, mask_;  // [slots, d_k], [slots, d_v], m(d) for d < ⌈w⌉
  std::vector<int64_t> position_;  // absolute position of each slot's key (−1: empty)
  std::vector<Real> q_;            // the query being turned
  std::vector<int64_t> dist_;      // distances of the slots' keys from the query
};

// A layer's units, each a ScreeningTileCache, then the tile output (TileOutputRow: steps
// 11–13) of each unit's aggregate.
template <typename Real>
class CpuScreeningCache final : public ScreeningCache<Real> {
 public:
  CpuScreeningCache(const ScreeningShape& shape, const std::vector<TileScalars>& tiles);
  // StepRows of the one row.
  void Step(const Real* P, int64_t pos, Real* U) override;
  // The units in parallel (OpenMP, when rows > 1), each through the rows in order.
  void StepRows(const Real* P, int64_t ldp, int64_t rows, int64_t pos0, Real* U, int64_t ldu) override;
  int64_t CachedKeys(int64_t tile, int64_t steps) const override { return units_[tile].CachedKeys(steps); }

 private:
  // Unit t's step at `pos`: P and U are the token's rows; h [d_v] scratch.
  void StepUnit(size_t t, const Real* P, int64_t pos, Real* h, Real* U);

  ScreeningShape shape_;
  std::vector<ScreeningTileCache<Real>> units_;
};

}  // namespace multiscreen::kernels::cpu
