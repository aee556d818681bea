#include "cli/memory_bound.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/h5_file.h"
#include "cli/flags.h"
#include "common/log.h"
#include "common/peak_memory.h"

ABSL_FLAG(std::string, memory, "1G",
          "init, ckpt init/reshard/export, forward --no_grad: bound on resident memory (bytes; K, M, G, T suffixes are powers of 1024)");

namespace multiscreen::cli {
namespace {

std::string Gib(int64_t bytes) { return absl::StrFormat("%.2f GiB", double(bytes) / double(int64_t{1} << 30)); }

// The process's resident memory before the command's work (its code and shared
// libraries: ~20 MiB in a CPU build, ~170 MiB where CUDA's libraries are linked and
// relocated at start-up); set by MemoryBoundBytes, which every bounded command calls first.
int64_t g_start_bytes = 0;

}  // namespace

absl::StatusOr<int64_t> MemoryBoundBytes() {
  g_start_bytes = PeakResidentBytes();
  const std::string text = absl::GetFlag(FLAGS_memory);
  auto parsed = ParseByteSize("memory", text);
  if (!parsed.ok()) return parsed.status();
  const int64_t bytes = *parsed;
  constexpr int64_t kMinimum = int64_t{64} << 20;
  if (bytes < kMinimum) {
    return absl::InvalidArgumentError(absl::StrCat("--memory=", text, " is below the 64 MiB these commands need"));
  }
  return bytes;
}

int64_t BlockBytes(int64_t bound) { return std::clamp<int64_t>(bound / 16, int64_t{1} << 20, int64_t{16} << 20); }

absl::Status CheckFreeDisk(const std::string& dir, int64_t needed) {
  namespace fs = std::filesystem;
  fs::path at = fs::absolute(fs::path(dir));
  std::error_code ec;
  while (!at.empty() && !fs::exists(at, ec) && at != at.root_path()) at = at.parent_path();
  const int64_t free = FreeBytes(at.string());
  if (free >= 0 && free < needed) {
    // A directory no file can be created in (/proc, /sys: file systems that report 0 bytes
    // free) is refused for that, not for its space: "only 0 bytes free on /proc" sent a
    // user looking for disk space. A probe file is created and removed at once.
    const std::string probe_template = (at / ".multiscreen-write-probe-XXXXXX").string();
    std::vector<char> probe(probe_template.begin(), probe_template.end());
    probe.push_back('\0');
    const int fd = ::mkstemp(probe.data());
    if (fd < 0) {
      const int err = errno;
      return absl::PermissionDeniedError(absl::StrCat(dir, ": ", at.string(), " is not a writable directory (creating a file "
                                                      "there: ", std::strerror(err), "); choose another path"));
    }
    ::close(fd);
    ::unlink(probe.data());
    return absl::ResourceExhaustedError(absl::StrCat(dir, ": needs ", needed, " bytes (", Gib(needed), "), only ", free,
                                                     " (", Gib(free), ") are free on ", at.string()));
  }
  return absl::OkStatus();
}

void ReportPeakMemory(const char* command, int64_t bound) {
  const int64_t peak = PeakResidentBytes() - g_start_bytes;
  const std::string line = absl::StrFormat(
      "%s: peak resident memory %.1f MiB (VmHWM), bound %.1f MiB, over the %.1f MiB the program held at start-up",
      command, double(peak) / (1 << 20), double(bound) / (1 << 20), double(g_start_bytes) / (1 << 20));
  if (peak > bound) {
    LogWarning(line, ": over the bound");
  } else {
    LogInfo(line);
  }
}

}  // namespace multiscreen::cli
