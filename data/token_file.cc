#include "data/token_file.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace multiscreen {

absl::StatusOr<std::vector<int32_t>> ReadTokenFile(const std::string& path, int64_t max_tokens) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open token file"));
  int32_t header[kTokenFileHeaderInts] = {};
  if (!in.read(reinterpret_cast<char*>(header), sizeof(header))) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": shorter than the 1024-byte llm.c header"));
  }
  if (header[0] != kTokenFileMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": bad magic ", header[0], " (expected ", kTokenFileMagic, ", llm.c .bin)"));
  }
  const int32_t version = header[1];
  if (version != 1 && version != 2) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": unsupported version ", version, " (expected 1 or 2)"));
  }
  const int64_t count = header[2];
  const int64_t width = version == 1 ? 2 : 4;
  std::error_code ec;
  const auto file_size = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  if (ec || count < 0 || file_size != static_cast<int64_t>(sizeof(header)) + count * width) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": header says ", count, " tokens of ", width,
                                                   " bytes but the file holds ", file_size - int64_t(sizeof(header)),
                                                   " bytes after the header"));
  }
  const int64_t n = max_tokens < 0 ? count : max_tokens;
  if (n > count) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": holds ", count, " tokens, ", n, " needed"));
  }
  std::vector<int32_t> tokens(n);
  if (version == 1) {
    std::vector<uint16_t> raw(n);
    in.read(reinterpret_cast<char*>(raw.data()), n * 2);
    for (int64_t i = 0; i < n; ++i) tokens[i] = raw[i];
  } else {
    in.read(reinterpret_cast<char*>(tokens.data()), n * 4);
  }
  if (!in) return absl::DataLossError(absl::StrCat(path, ": read failed"));
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

}  // namespace multiscreen
