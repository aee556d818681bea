#include "cli/flags.h"

#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, model, "psi8", "model name under configs/models/ or a .textproto path");
ABSL_FLAG(std::string, out, "", "output file");
ABSL_FLAG(int64_t, seed, 0, "random seed");
ABSL_FLAG(int64_t, micro_batch, 1, "sequences per micro-batch (B)");
ABSL_FLAG(int64_t, seq_len, 0, "tokens per sequence (T)");
ABSL_FLAG(std::string, tokenizer, "data_cache/gpt2",
          "directory with vocab.json (or encoder.json) and merges.txt (or vocab.bpe)");
ABSL_FLAG(std::vector<std::string>, input, {}, "input files or directories, comma-separated");
ABSL_FLAG(std::string, output, "", "output directory");
ABSL_FLAG(int32_t, threads, 0, "worker threads (0: all cores)");
ABSL_FLAG(std::string, precision, "fp32", "fp32 | bf16 | fp64 (fp64: the double-precision reference)");

namespace multiscreen::cli {

namespace {

// --help lists the flags defined under cli/ (shared by all subcommands, since
// absl flags are process-global), not absl's own.
void SetUsage(const char* usage) {
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [](absl::string_view path) { return path.find("cli/") != absl::string_view::npos; };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
}

}  // namespace

absl::Status ParseFlags(int argc, char** argv, const char* usage) {
  SetUsage(usage);
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", rest[1], "' (flags are --name=value)"));
  }
  return absl::OkStatus();
}

absl::Status ParseFlagsAndArgs(int argc, char** argv, const char* usage, std::vector<std::string>* args) {
  SetUsage(usage);
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  args->assign(rest.begin() + 1, rest.end());
  return absl::OkStatus();
}

int Fail(const char* command, const absl::Status& status) {
  std::fprintf(stderr, "multiscreen %s: %s\n", command, std::string(status.message()).c_str());
  return 1;
}

}  // namespace multiscreen::cli
