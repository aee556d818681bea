// Token shards in llm.c's .bin layout (DESIGN "Data"): a header of 256 int32
// (magic 20240520, version, token count, rest 0), then the tokens as uint16
// (version 1) or uint32 (version 2, for vocabularies past 65,535).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace multiscreen {

inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr int kTokenFileHeaderInts = 256;

// Reads the first `max_tokens` tokens (all when < 0) of `path`.
// Errors name the file: unreadable, wrong magic or version, a header count that
// disagrees with the file size, fewer tokens than asked for.
absl::StatusOr<std::vector<int32_t>> ReadTokenFile(const std::string& path, int64_t max_tokens = -1);

// Writes `tokens` to `path` (version 1 when every id < 65,536, else 2).
absl::Status WriteTokenFile(const std::string& path, const std::vector<int32_t>& tokens);

}  // namespace multiscreen
