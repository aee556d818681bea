// Atomic small-file writes (text_file.h).
#include "launch/text_file.h"

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace multiscreen {

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc | std::ios::binary);
    out << text;
    if (!out.flush()) return absl::DataLossError(absl::StrCat(tmp, ": write failed"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return absl::DataLossError(absl::StrCat(path, ": rename failed"));
  return absl::OkStatus();
}

}  // namespace multiscreen
