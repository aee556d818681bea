// Which part of the model each grid position computes (DESIGN "Data flow of one
// training step"): tiles of every layer and rows of the tied vocabulary table
// split over tp, contiguous blocks of layers over pp; the first stage embeds
// (s_E), the last owns the head (s_F); both hold their tp rank's W_E rows.
#pragma once

#include <cstdint>
#include <utility>

#include "absl/status/statusor.h"
#include "common/config.h"
#include "model/param_layout.h"
#include "parallel/process_grid.h"

namespace multiscreen {

// The ShardSpec of grid position `coord` (ShardSpec::ForRank, whose
// SplitRange rule model/param_layout.h defines). Errors: a split that leaves a rank
// nothing ("--tp=8 exceeds N_H = 4 tiles per layer", "--pp=8 exceeds N_L = 4
// layers"), or a coordinate outside the shape.
absl::StatusOr<ShardSpec> ShardForCoord(const ModelDims& dims, const GridShape& shape, const GridCoord& coord);

}  // namespace multiscreen
