#include "common/build_info.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace multiscreen {
namespace {

BuildInfo& Current() {
  static BuildInfo info{MULTISCREEN_PROJECT_VERSION, "unknown"};
  return info;
}

}  // namespace

const BuildInfo& ThisBuild() { return Current(); }

void SetBuildInfo(BuildInfo info) { Current() = std::move(info); }

std::string BuildDescription() { return absl::StrCat("multiscreen ", Current().version, " (", Current().commit, ")"); }

}  // namespace multiscreen
