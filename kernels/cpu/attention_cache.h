// The Transformer's key-value cache on the CPU (issue 18; kernels/decode_cache.h): per
// layer the RoPE-turned (and, with qk_norm, unit) keys and the values of every past
// token, and one query's attention over them by the layer's mechanism
// (kernels/cpu/attention.h AttentionWeights), scores and sums in fp64. The CPU's
// kernels::AttentionCache and the oracle of the CUDA one (kernels/cuda/attention_decode.h).
// The cache grows by 2 · heads · d_h values per token (no window). Any Real, host memory.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/decode_cache.h"

namespace multiscreen::kernels::cpu {

template <typename Real>
class CpuAttentionCache final : public AttentionCache<Real> {
 public:
  explicit CpuAttentionCache(const AttentionCacheShape& shape) : shape_(shape) {}
  void Step(const Real* qkv, int64_t pos, Real* o) override;
  // The rows' keys and values cached first, then their (row, head) outputs in parallel
  // (OpenMP, when rows > 1): each sums over the keys up to its own position, as Step.
  void StepRows(const Real* qkv, int64_t ldqkv, int64_t rows, int64_t pos0, Real* o, int64_t ldo) override;

 private:
  AttentionCacheShape shape_;
  std::vector<Real> k_, v_;   // [positions, heads · d_h]
  std::vector<Real> q_;       // [rows, heads · d_h]: the queries being turned
};

}  // namespace multiscreen::kernels::cpu
