#include "data/token_file.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/input_file.h"
#include "common/status.h"
#include "data/byte_source.h"

namespace multiscreen {

absl::StatusOr<TokenFileInfo> CheckTokenFileHeader(const std::string& path, const int32_t* header,
                                                   int64_t file_size) {
  const int64_t header_bytes = kTokenFileHeaderInts * 4;
  if (file_size >= 4) {  // compressed tokens are often shorter than a header: said first
    MS_RETURN_IF_ERROR(CompressedTokenDataError(
        path, MagicCompression(std::string_view(reinterpret_cast<const char*>(header), 4))));
  }
  if (file_size < header_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", file_size, " bytes, shorter than the 1024-byte llm.c header"));
  }
  if (header[0] != kTokenFileMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": bad magic ", header[0], " (expected ", kTokenFileMagic, ", llm.c .bin)"));
  }
  TokenFileInfo info;
  info.version = header[1];
  if (info.version != 1 && info.version != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": unsupported version ", info.version, " (expected 1 or 2)"));
  }
  info.count = header[2];
  info.width = info.version == 1 ? 2 : 4;
  if (info.count < 0 || file_size != header_bytes + info.count * info.width) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": header says ", info.count, " tokens of ", info.width,
                                                   " bytes but the file holds ", file_size - header_bytes,
                                                   " bytes after the header"));
  }
  return info;
}

absl::StatusOr<std::vector<int32_t>> ReadTokenFile(const std::string& path, int64_t max_tokens, int64_t vocab) {
  int64_t file_size = 0;
  auto fd = OpenRegularFile(path, "token file", kMaxTokenFileBytes, &file_size);
  if (!fd.ok()) return fd.status();
  // Reads `bytes` at `offset`, all of them or an error.
  auto read_at = [&](void* out, int64_t bytes, int64_t offset) -> absl::Status {
    auto* p = static_cast<char*>(out);
    while (bytes > 0) {
      const ssize_t n = ::pread(*fd, p, static_cast<size_t>(bytes), offset);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return absl::DataLossError(absl::StrCat(path, ": read failed"));
      p += n, bytes -= n, offset += n;
    }
    return absl::OkStatus();
  };
  int32_t header[kTokenFileHeaderInts] = {};
  if (file_size > 0) {  // a short file's first bytes still say what it is (gzip data, say)
    if (auto s = read_at(header, std::min<int64_t>(file_size, sizeof(header)), 0); !s.ok()) {
      ::close(*fd);
      return s;
    }
  }
  auto info = CheckTokenFileHeader(path, header, file_size);
  if (!info.ok()) {
    ::close(*fd);
    return info.status();
  }
  const int64_t count = info->count;
  const int64_t n = max_tokens < 0 ? count : max_tokens;
  if (n > count) {
    ::close(*fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": holds ", count, " tokens, ", n, " needed"));
  }
  std::vector<int32_t> tokens(n);
  absl::Status read;
  if (info->version == 1) {
    std::vector<uint16_t> raw(n);
    read = read_at(raw.data(), n * 2, sizeof(header));
    for (int64_t i = 0; i < n; ++i) tokens[i] = raw[i];
  } else {
    read = read_at(tokens.data(), n * 4, sizeof(header));
  }
  ::close(*fd);
  if (!read.ok()) return read;
  const int64_t limit = vocab > 0 ? vocab : int64_t{INT32_MAX} + 1;
  for (int64_t i = 0; i < n; ++i) {
    // A version-2 id past 2^31 - 1 reads as a negative int32.
    const int64_t id = tokens[i] < 0 ? int64_t{static_cast<uint32_t>(tokens[i])} : tokens[i];
    if (id >= limit) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": token ", i, " is ", id, ", not below ",
          vocab > 0 ? absl::StrCat("the model's vocabulary V = ", vocab) : std::string("2^31")));
    }
  }
  return tokens;
}

absl::Status WriteTokenFile(const std::string& path, const std::vector<int32_t>& tokens) {
  bool wide = false;
  for (int32_t t : tokens) {
    if (t < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": negative token id ", t));
    wide |= t > 0xffff;
  }
  int32_t header[kTokenFileHeaderInts] = {};
  header[0] = kTokenFileMagic;
  header[1] = wide ? 2 : 1;
  header[2] = static_cast<int32_t>(tokens.size());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot create token file"));
  out.write(reinterpret_cast<const char*>(header), sizeof(header));
  if (wide) {
    out.write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 4);
  } else {
    std::vector<uint16_t> narrow(tokens.begin(), tokens.end());
    out.write(reinterpret_cast<const char*>(narrow.data()), narrow.size() * 2);
  }
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TokenFileWriter>> TokenFileWriter::Create(const std::string& path, int version) {
  if (version != 1 && version != 2) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": token file version ", version, " (expected 1 or 2)"));
  }
  std::unique_ptr<TokenFileWriter> w(new TokenFileWriter());
  w->path_ = path;
  w->version_ = version;
  w->file_ = std::fopen(path.c_str(), "wb");
  if (w->file_ == nullptr) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot create token file"));
  const int32_t header[kTokenFileHeaderInts] = {};
  if (std::fwrite(header, sizeof(header), 1, w->file_) != 1) {
    return absl::DataLossError(absl::StrCat(path, ": write failed"));
  }
  return w;
}

TokenFileWriter::~TokenFileWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status TokenFileWriter::Append(const int32_t* ids, int64_t n) {
  if (file_ == nullptr) return absl::FailedPreconditionError(absl::StrCat(path_, ": appended after Finish"));
  if (count_ + n > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": more than 2^31 - 1 tokens in one shard"));
  }
  const int64_t width = version_ == 1 ? 2 : 4;
  const uint32_t limit = version_ == 1 ? 0xffffu : 0x7fffffffu;
  buffer_.resize(static_cast<size_t>(n * width));
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || static_cast<uint32_t>(ids[i]) > limit) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": token id ", ids[i], " does not fit version ", version_, " (max ", limit, ")"));
    }
    if (version_ == 1) {
      const auto v = static_cast<uint16_t>(ids[i]);
      std::memcpy(buffer_.data() + i * 2, &v, 2);
    } else {
      std::memcpy(buffer_.data() + i * 4, &ids[i], 4);
    }
  }
  if (n > 0 && std::fwrite(buffer_.data(), buffer_.size(), 1, file_) != 1) {
    return absl::DataLossError(absl::StrCat(path_, ": write failed"));
  }
  count_ += n;
  return absl::OkStatus();
}

absl::Status TokenFileWriter::Finish() {
  if (file_ == nullptr) return absl::FailedPreconditionError(absl::StrCat(path_, ": finished twice"));
  int32_t header[kTokenFileHeaderInts] = {};
  header[0] = kTokenFileMagic;
  header[1] = version_;
  header[2] = static_cast<int32_t>(count_);
  const bool ok = std::fseek(file_, 0, SEEK_SET) == 0 && std::fwrite(header, sizeof(header), 1, file_) == 1;
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!ok || !closed) return absl::DataLossError(absl::StrCat(path_, ": write failed"));
  return absl::OkStatus();
}

}  // namespace multiscreen
