// Atomic small-file writes (text_file.h).
#include "common/text_file.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/input_file.h"
#include "common/status.h"

namespace multiscreen {

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  MS_RETURN_IF_ERROR(CheckReplaceableOutput("", path));
  // A temporary of this writer's own: two processes writing the same file at once (two
  // `sweep run`s on one sweep) must not rename each other's temporary away.
  static std::atomic<uint64_t> serial{0};
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid(), ".", serial.fetch_add(1));
  {
    std::ofstream out(tmp, std::ios::trunc | std::ios::binary);
    errno = 0;
    out << text;
    // Flushed here: a write error that only the destructor met would rename a cut-short
    // file into place.
    if (!out.flush()) {
      const int err = errno;
      out.close();
      std::remove(tmp.c_str());
      return absl::DataLossError(absl::StrCat(tmp, ": write failed", err != 0 ? ": " : "", err != 0 ? std::strerror(err) : ""));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return absl::DataLossError(absl::StrCat(path, ": rename failed: ", std::strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace multiscreen
