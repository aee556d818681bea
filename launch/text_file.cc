// Atomic small-file writes (text_file.h).
#include "launch/text_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/input_file.h"
#include "common/status.h"

namespace multiscreen {

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  MS_RETURN_IF_ERROR(CheckReplaceableOutput("", path));
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc | std::ios::binary);
    out << text;
    if (!out.flush()) return absl::DataLossError(absl::StrCat(tmp, ": write failed"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::DataLossError(absl::StrCat(path, ": rename failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace multiscreen
