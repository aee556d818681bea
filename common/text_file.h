// Writing a small text file without ever leaving a half-written one in its place: the
// sweep's files, eval's results, a run's run.json, status.json and data.json.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace multiscreen {

// Writes `text` to `path` through a temporary of this call's own beside it
// (`path`.tmp.<pid>.<n>), flushed, then renamed over `path`: concurrent writers of one
// path each succeed, and the last rename wins; a crash mid-write leaves the old file or
// the new one, never a cut-short one.
// Errors name the file and the cause ("<tmp>: write failed: No space left on device"),
// and leave no temporary behind; a `path` that is a directory, FIFO or device is refused
// (CheckReplaceableOutput) rather than replaced.
absl::Status WriteTextFile(const std::string& path, const std::string& text);

}  // namespace multiscreen
