// Flag parsing shared by the subcommands: absl flags, positional arguments refused.
#pragma once

#include <string>

#include "absl/flags/declare.h"
#include "absl/status/status.h"

// Flags shared by several subcommands (absl flags are process-global).
ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, out);
ABSL_DECLARE_FLAG(int64_t, seed);
ABSL_DECLARE_FLAG(int64_t, micro_batch);
ABSL_DECLARE_FLAG(int64_t, seq_len);
ABSL_DECLARE_FLAG(std::string, precision);

namespace multiscreen::cli {

// Parses absl flags from argv (argv[0] is the subcommand name). Returns an
// error naming a stray positional argument. absl itself exits on an unknown flag.
absl::Status ParseFlags(int argc, char** argv, const char* usage);

// Prints "multiscreen <command>: <message>" on stderr and returns 1.
int Fail(const char* command, const absl::Status& status);

}  // namespace multiscreen::cli
