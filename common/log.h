// Minimal leveled logging to stderr. Debian 12's Abseil (20220623) predates
// absl/log, so this stands in for LOG(INFO)/LOG(WARNING) until it is available.
#pragma once

#include <string>

#include "absl/strings/str_cat.h"

namespace multiscreen {

enum class LogLevel { kInfo, kWarning, kError };

// Writes one line "[I|W|E] message" to stderr (atomic per line).
void LogLine(LogLevel level, const std::string& message);

template <typename... Args>
void LogInfo(const Args&... args) { LogLine(LogLevel::kInfo, absl::StrCat(args...)); }
template <typename... Args>
void LogWarning(const Args&... args) { LogLine(LogLevel::kWarning, absl::StrCat(args...)); }
template <typename... Args>
void LogError(const Args&... args) { LogLine(LogLevel::kError, absl::StrCat(args...)); }

}  // namespace multiscreen
