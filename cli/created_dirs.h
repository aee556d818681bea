// Directories a command creates for its output, taken back when it fails before writing
// anything there (`train`'s run directory, `prepare`'s output directory): the corrected
// command then starts clean, and a directory that existed before is never touched.
#pragma once

#include <filesystem>
#include <string>

namespace multiscreen::cli {

// The highest directory of `dir`'s path that does not exist yet ("" when dir exists, or
// the path cannot be checked): what the command will have created, e.g. `a` for
// `a/b/c` when neither a nor a/b exists. Call it before creating anything.
std::filesystem::path FirstMissingDir(const std::string& dir);

// Removes `dir` if it is empty, then its ancestors up to `created` (FirstMissingDir's
// answer before the command ran), each only if empty; stops at the first that is not.
// A `dir` already gone counts as removed. Nothing happens when `created` is empty.
void RemoveCreatedDirs(const std::string& dir, const std::filesystem::path& created);

}  // namespace multiscreen::cli
