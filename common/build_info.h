// The build of this program: its version (the CMake project's) and the source commit it
// was built from (`git describe --always --dirty`, "unknown" outside a git checkout), as
// `multiscreen --version` prints them and run.json, the training log's start line and
// checkpoint manifests record them. Only the multiscreen binary knows the commit (its
// main calls SetBuildInfo from a header generated at every build, so a new commit
// relinks that one binary, not every library and test): elsewhere it reads "unknown".
#pragma once

#include <string>

namespace multiscreen {

struct BuildInfo {
  std::string version;  // "0.1"
  std::string commit;   // "643dccc", "643dccc-dirty", "v0.1-3-g643dccc" or "unknown"
};

// This process's build: what SetBuildInfo recorded, else {the project version, "unknown"}.
const BuildInfo& ThisBuild();

// Records the build (cli/main.cc, before anything else runs; not thread-safe).
void SetBuildInfo(BuildInfo info);

// "multiscreen 0.1 (643dccc)": one line for logs and --version.
std::string BuildDescription();

}  // namespace multiscreen
