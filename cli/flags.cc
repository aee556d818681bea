#include "cli/flags.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
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
ABSL_FLAG(std::string, precision, "fp32", "fp32 | bf16 | fp16 | fp64 (fp64: the double-precision reference)");

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

// Flags are process-global, so absl accepts every subcommand's flags everywhere;
// this refuses the ones the running subcommand does not read.
absl::Status RefuseOtherFlags(int argc, char** argv, const char* usage, std::initializer_list<std::string_view> accepted) {
  for (const std::string& name : GivenFlags(argc, argv)) {
    if (std::find(accepted.begin(), accepted.end(), name) == accepted.end()) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " is not a flag of this command; usage: ", usage));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> GivenFlags(int argc, char** argv) {
  const auto all = absl::GetAllFlags();
  std::vector<std::string> names;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];  // Debian's Abseil has its own string_view
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    arg = arg.substr(0, arg.find('='));
    auto it = all.find(arg);
    if (it == all.end() && absl::StartsWith(arg, "no")) it = all.find(arg.substr(2));  // --noflag
    if (it == all.end() || it->second->Filename().find("cli/") == std::string::npos) continue;
    names.emplace_back(it->first);
  }
  return names;
}

bool Given(int argc, char** argv, std::string_view name) {
  const std::vector<std::string> names = GivenFlags(argc, argv);
  return std::find(names.begin(), names.end(), name) != names.end();
}

absl::Status ParseFlags(int argc, char** argv, const char* usage, std::initializer_list<std::string_view> accepted) {
  SetUsage(usage);
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", rest[1], "' (flags are --name=value)"));
  }
  return RefuseOtherFlags(argc, argv, usage, accepted);
}

absl::Status ParseFlagsAndArgs(int argc, char** argv, const char* usage, std::initializer_list<std::string_view> accepted,
                               std::vector<std::string>* args) {
  SetUsage(usage);
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  args->assign(rest.begin() + 1, rest.end());
  return RefuseOtherFlags(argc, argv, usage, accepted);
}

absl::Status ApplyThreadsFlag() {
  const int32_t threads = absl::GetFlag(FLAGS_threads);
  if (threads < 0) return absl::InvalidArgumentError(absl::StrCat("--threads=", threads, " must be >= 0"));
  if (threads > 0) omp_set_num_threads(threads);
  return absl::OkStatus();
}

int Fail(const char* command, const absl::Status& status) {
  std::fprintf(stderr, "multiscreen %s: %s\n", command, std::string(status.message()).c_str());
  return 1;
}

}  // namespace multiscreen::cli
