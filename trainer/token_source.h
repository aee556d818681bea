// Where the training loop gets its tokens: sample i of the run's global sample
// sequence is a window of T + 1 tokens. data/'s streaming loader implements
// it over token shards; tests implement it over synthetic streams.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace multiscreen {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // Writes samples [first, first + count) as tokens [count, T + 1].
  virtual absl::Status Fill(int64_t first, int64_t count, int64_t T, int32_t* tokens) = 0;
};

}  // namespace multiscreen
