#include "parallel/shard_split.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace multiscreen {

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
  return ShardSpec::ForRank(dims, shape.tp, shape.pp, coord.tp, coord.pp);
}

}  // namespace multiscreen
