// Token shards in llm.c's .bin layout (DESIGN "Data"): a header of 256 int32
// (magic 20240520, version, token count, rest 0), then the tokens as uint16
// (version 1) or uint32 (version 2, for vocabularies past 65,535).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace multiscreen {

inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr int kTokenFileHeaderInts = 256;
// The largest well-formed file: the header's int32 count of 4-byte tokens.
inline constexpr int64_t kMaxTokenFileBytes = kTokenFileHeaderInts * 4 + int64_t{INT32_MAX} * 4;

// What a valid header says: version (1: uint16 tokens, 2: uint32), token count, and
// the width in bytes of one token.
struct TokenFileInfo {
  int32_t version = 1;
  int64_t count = 0;
  int64_t width = 2;
};

// Checks a header (kTokenFileHeaderInts int32, as read from `path`) against the
// file's size in bytes. Errors name `path`: a file shorter than the header, wrong
// magic or version, a token count that disagrees with the size.
absl::StatusOr<TokenFileInfo> CheckTokenFileHeader(const std::string& path, const int32_t* header,
                                                   int64_t file_size);

// Reads the first `max_tokens` tokens (all when < 0) of `path`, each checked to be
// below `vocab` (when > 0; ids are never past 2^31 - 1, the int32 they become).
// Errors name the file: missing, not a regular file (a FIFO, a directory), wrong magic
// or version, a header count that disagrees with the file size, fewer tokens than
// asked for, a token id out of range (with its index).
absl::StatusOr<std::vector<int32_t>> ReadTokenFile(const std::string& path, int64_t max_tokens = -1,
                                                   int64_t vocab = 0);

// Writes `tokens` to `path` (version 1 when every id < 65,536, else 2).
absl::Status WriteTokenFile(const std::string& path, const std::vector<int32_t>& tokens);

// Writes one token file incrementally (tokens need not fit in memory): Create writes
// a placeholder header, Append adds tokens, Finish writes the real header and closes.
// The file is only valid after Finish. Not thread-safe.
class TokenFileWriter {
 public:
  // `version` 1 stores uint16 (ids < 65,536), 2 stores uint32.
  static absl::StatusOr<std::unique_ptr<TokenFileWriter>> Create(const std::string& path, int version);
  ~TokenFileWriter();

  // Appends n ids; errors name the file: an id out of range for the version, more
  // than 2^31 - 1 tokens (the header's int32 count), a failed write.
  absl::Status Append(const int32_t* ids, int64_t n);
  absl::Status Finish();

  int64_t count() const { return count_; }
  const std::string& path() const { return path_; }

 private:
  TokenFileWriter() = default;
  std::string path_;
  int version_ = 1;
  int64_t count_ = 0;
  std::FILE* file_ = nullptr;
  std::vector<char> buffer_;
};

}  // namespace multiscreen
