#include "common/log.h"

#include <cstdio>
#include <string>

namespace multiscreen {

void LogLine(LogLevel level, const std::string& message) {
  const char tag = level == LogLevel::kInfo ? 'I' : level == LogLevel::kWarning ? 'W' : 'E';
  std::string line = absl::StrCat("[", std::string(1, tag), "] ", message, "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace multiscreen
