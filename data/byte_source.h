// The bytes of an input file as `prepare` reads them: plain, or decompressed when the name
// ends in .gz (zlib) or .zst (zstd); a pipe or FIFO read without blocking an interrupt.
// LineReader splits them into lines. prepare's readers (data/prepare.h) and the
// evaluations' text inputs (eval ppl --data, eval choice --task) read through these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace multiscreen {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads up to `cap` bytes; 0 at the end. Errors name the file: a failed read, corrupt
  // or truncated gzip/zstd data, "not gzip data" under a .gz name.
  virtual absl::StatusOr<size_t> Read(char* buf, size_t cap) = 0;
};

// The compression a file name announces (its suffix, in any case: .gz, .GZ, .zst, .ZST).
enum class Compression { kNone, kGzip, kZstd };
Compression NamedCompression(const std::string& path);

// The compression a file's first bytes announce: gzip's magic 1f 8b, or a zstd frame's
// 28 b5 2f fd (RFC 8878 3.1.1; a skippable frame, 5? 2a 4d 18, also begins zstd data).
Compression MagicCompression(std::string_view head);
// MagicCompression of the first bytes of the file at `path` (kNone when it cannot be read).
Compression FileMagicCompression(const std::string& path);

// Token files (llm.c, Megatron, raw uint16) are memory-mapped as stored: the error for
// `path` holding `held` compressed data (its magic, MagicCompression, or its name), naming
// the tool that decompresses it; OK for kNone.
absl::Status CompressedTokenDataError(const std::string& path, Compression held);

// True when `path` ends in .gz or .zst, in any case (OpenByteSource decompresses it).
bool IsCompressedName(const std::string& path);

// `path` without a final .gz or .zst: what names the format of its content
// ("val.jsonl.zst" → "val.jsonl").
std::string WithoutCompressionSuffix(const std::string& path);

// An error naming `path` when `head`, its first bytes, disagrees with what its name says:
// gzip's or zstd's magic number (1f 8b; 28 b5 2f fd) under a name without that suffix
// (files are decompressed by their name; read as text the data would be binary noise —
// neither magic begins UTF-8 text, 8b and b5 being continuation bytes), or a regular file
// named .gz/.zst whose head holds no such magic. The advice fits the source: a regular
// file is told the name to give it, a pipe (`<(cat x.gz)`, `/dev/stdin`) to decompress
// before it. An empty head (a pipe not read yet) is OK.
absl::Status CheckCompressedName(const std::string& path, std::string_view head);

// Opens `path` (decompressing .gz / .zst). `cancelled` (may be empty) is polled between
// reads of a pipe or FIFO: true stops the read with a Cancelled error. Errors name the
// file: missing, a directory, cannot be opened, a regular file holding gzip or zstd data
// under a name without .gz / .zst (read as text it would be binary noise).
absl::StatusOr<std::unique_ptr<ByteSource>> OpenByteSource(const std::string& path,
                                                           std::function<bool()> cancelled = {});

// The lines of a ByteSource, each without its '\n' (a "\r" before it is kept, as
// std::getline keeps it); the last line may lack a '\n'.
class LineReader {
 public:
  // Opens `path` through OpenByteSource. `max_line_bytes`: a longer line is an error
  // naming the file and line (a binary file with no newline would fill memory).
  static absl::StatusOr<LineReader> Open(const std::string& path, int64_t max_line_bytes = int64_t{1} << 30);

  // The next line into *line; false at the end. Errors: the source's, a line too long.
  absl::StatusOr<bool> Next(std::string* line);

  // The 1-based number of the line Next returned last.
  int64_t line_number() const { return line_; }

 private:
  std::string path_;
  std::unique_ptr<ByteSource> source_;
  std::vector<char> buf_;
  size_t pos_ = 0, end_ = 0;
  bool done_ = false;
  int64_t line_ = 0, max_line_bytes_ = 0;
};

}  // namespace multiscreen
