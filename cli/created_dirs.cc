#include "cli/created_dirs.h"

#include <system_error>

namespace multiscreen::cli {

namespace fs = std::filesystem;

std::filesystem::path FirstMissingDir(const std::string& dir_name) {
  std::error_code ec;
  fs::path dir = fs::path(dir_name).lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();  // "a/b/c/"
  fs::path missing;
  while (!dir.empty()) {
    const bool exists = fs::exists(dir, ec);
    if (ec) return {};
    if (exists) break;
    missing = dir;
    if (!dir.has_relative_path()) break;
    dir = dir.parent_path();
  }
  return missing;
}

void RemoveCreatedDirs(const std::string& dir_name, const std::filesystem::path& created) {
  if (created.empty()) return;
  std::error_code ec;
  fs::path dir = fs::path(dir_name).lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();
  const fs::path top = created.lexically_normal();
  if (fs::exists(dir, ec) && !fs::remove(dir, ec)) return;  // not empty: stop
  while (dir != top && dir.has_relative_path()) {
    dir = dir.parent_path();
    if (dir.empty() || !fs::remove(dir, ec)) return;  // not empty (or not ours): stop
  }
}

}  // namespace multiscreen::cli
