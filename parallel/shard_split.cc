#include "parallel/shard_split.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace multiscreen {

std::pair<int64_t, int64_t> SplitRange(int64_t n, int64_t parts, int64_t i) {
  const int64_t base = n / parts, extra = n % parts;
  const int64_t begin = i * base + std::min(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

absl::StatusOr<ShardSpec> ShardForCoord(const ModelDims& dims, const GridShape& shape, const GridCoord& coord) {
  if (shape.tp > dims.n_heads) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tp=", shape.tp, " exceeds N_H = ", dims.n_heads, " tiles per layer of ", dims.name));
  }
  if (shape.pp > dims.n_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pp=", shape.pp, " exceeds N_L = ", dims.n_layers, " layers of ", dims.name));
  }
  if (shape.tp > dims.vocab) {
    return absl::InvalidArgumentError(absl::StrCat("--tp=", shape.tp, " exceeds the vocabulary of ", dims.vocab));
  }
  if (coord.tp < 0 || coord.tp >= shape.tp || coord.pp < 0 || coord.pp >= shape.pp || coord.dp < 0 ||
      coord.dp >= shape.dp) {
    return absl::InvalidArgumentError(absl::StrCat("grid coordinate (dp ", coord.dp, ", pp ", coord.pp, ", tp ",
                                                   coord.tp, ") outside the grid"));
  }
  ShardSpec s;
  std::tie(s.layer_begin, s.layer_end) = SplitRange(dims.n_layers, shape.pp, coord.pp);
  std::tie(s.tile_begin, s.tile_end) = SplitRange(dims.n_heads, shape.tp, coord.tp);
  std::tie(s.vocab_begin, s.vocab_end) = SplitRange(dims.vocab, shape.tp, coord.tp);
  s.embed = coord.pp == 0;
  s.head = coord.pp == shape.pp - 1;
  return s;
}

}  // namespace multiscreen
