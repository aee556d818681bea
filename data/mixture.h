// Weighted corpus mixtures: which source each training sample is drawn from, as a pure
// function of the sample index (no state, no drift), so that resume, any dp degree and
// any layout see the same windows.
//
// Let the weights w_0..w_{K-1} (finite, >= 0, positive sum) be normalized to p_k. The
// schedule repeats over blocks of B samples, B the smallest integer in [1, 4096] for which
// every p_k * B is within 1e-9 of an integer (30/70 -> B = 10, 1/3 -> 3), else 4096.
// Block quotas q_k are the largest-remainder rounding of p_k * B (Hamilton's method: the
// floors, then one more for the largest fractional parts, ties to the lower k), so every
// block holds exactly q_k samples of source k, and q_k / B = p_k whenever B was exact.
// Inside a block the sources interleave as Megatron's BlendedDataset orders a whole run
// (megatron/core/datasets/helpers.cpp, build_blending_indices): position j goes to the
// source k with q_k > 0 maximizing q_k * (j + 1) / B - (samples of k so far in the block),
// ties to the lower k; so every prefix of a block is within one sample of its share.
//
// Sample i: block b = i / B, position j = i mod B, source k = source[j], and it is
// source k's sample number m = b * q_k + rank[j] (rank[j]: the earlier positions of the
// block with source k). Each source draws its windows from its own WindowSampler
// (data/loader.h) at its own index m: its own epochs and permutations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace multiscreen {

class MixtureSchedule {
 public:
  inline static constexpr int64_t kMaxBlock = 4096;

  // `weights[k]`, `names[k]` (names used in errors only; may be empty). Errors, naming
  // the source: a weight that is negative or not finite; a sum that is zero; no sources.
  static absl::StatusOr<MixtureSchedule> Create(const std::vector<double>& weights,
                                                const std::vector<std::string>& names);

  int num_sources() const { return static_cast<int>(quota_.size()); }
  int64_t block() const { return static_cast<int64_t>(source_.size()); }
  // q_k: source k's samples in every block.
  int64_t quota(int k) const { return quota_[k]; }

  struct Pick {
    int source = 0;     // k
    int64_t index = 0;  // m: the source's own sample number
  };
  // The source and source-local index of global sample i (i >= 0).
  Pick Source(int64_t sample) const;
  // How many of samples [0, n) come from source k.
  int64_t CountBefore(int k, int64_t n) const;

 private:
  std::vector<int64_t> quota_;   // [K]
  std::vector<int32_t> source_;  // [B]: the source of each position of a block
  std::vector<int64_t> rank_;    // [B]: earlier positions of the block with the same source
  std::vector<std::vector<int64_t>> prefix_;  // [K][B + 1]: samples of k in positions [0, j)
};

}  // namespace multiscreen
