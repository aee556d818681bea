// Token ids against a model's vocabulary: an id past it would be embedded as zeros and
// scored against a logit that does not exist, so the trainer refuses the batch holding it
// (and `sweep plan` the held-out windows, through validation_data.h's scan).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "data/loader.h"

namespace multiscreen {

// OK when every id of `batch` (rows of seq_len + 1 tokens) lies in [0, vocab); else one line
// naming where the first other one is (`locate(row, column)`: the file and token of the
// batch's row and column), the `split` ("training", "validation") and window, the id as the
// file holds it (a version-2 shard's uint32 past 2^31 - 1 too), V and `model`.
absl::Status CheckTokenIds(const Batch& batch, int64_t vocab, const std::string& model, const char* split,
                           const std::function<std::string(int64_t, int64_t)>& locate);

}  // namespace multiscreen
