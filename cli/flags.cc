#include "cli/flags.h"

#include <omp.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/decimal.h"
#include "common/input_file.h"
#include "common/status.h"
#include "data/utf8.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/isa_environment.h"
#include "parallel/launcher.h"
#include "trainer/run_files.h"

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
ABSL_FLAG(std::string, isa, "",
          "CPU kernels' instruction-set path: generic | avx2 | avx512 | native; not given: $MULTISCREEN_ISA, else the "
          "CPU's best");
ABSL_FLAG(std::string, precision, "fp32",
          "train: fp32 | bf16 | fp16 (mixed precision); bench train: those and fp64; forward: fp32 | bf16 | fp64 (fp64: "
          "the double-precision reference); eval, generate, bench decode: fp32 | bf16");

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
absl::Status RefuseOtherFlags(int argc, char** argv, const char* usage, const std::vector<std::string_view>& accepted) {
  for (const std::string& name : GivenFlags(argc, argv)) {
    if (std::find(accepted.begin(), accepted.end(), name) == accepted.end()) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " is not a flag of this command; usage: ", usage));
    }
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// A flag given, and the text it was given ("" for a boolean given as --name or --noname);
// `arg`: how it was written ("--input=a.txt", "--noplot"), for messages.
// `known`: a flag of this program (else `name` is what was written, for the error);
// `has_value`: text was given (--name=v, --name v, --fromenv), not just --name or --noname.
// `problem`: why absl would refuse how it was given (--nojson=1, --fromenv=NAME with FLAGS_NAME
// unset, a trailing --flagfile), said by CheckSpecialForms; such an entry is no flag given.
struct GivenFlag {
  std::string name, value, arg;
  bool known = true, has_value = false;
  std::string problem;
};

// An entry CheckSpecialForms refuses with `problem`.
GivenFlag Problem(std::string arg, std::string problem) {
  GivenFlag f;
  f.arg = std::move(arg);
  f.known = false;
  f.problem = std::move(problem);
  return f;
}

// Adds to `names` this program's flags that `args` sets, reading --flagfile files
// (nested up to a depth) and --fromenv/--tryfromenv lists as absl does.
void CollectGivenFlags(const std::vector<std::string>& args, int depth, std::vector<GivenFlag>* names) {
  const auto all = absl::GetAllFlags();
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];  // Debian's Abseil has its own string_view
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    const size_t eq = arg.find('=');
    const absl::string_view name = arg.substr(0, eq);
    const bool has_value = eq != absl::string_view::npos;
    const std::string value = has_value ? std::string(arg.substr(eq + 1))
                                        : (i + 1 < args.size() ? args[i + 1] : std::string());
    if (name == "flagfile" || name == "fromenv" || name == "tryfromenv") {
      if (!has_value && i + 1 >= args.size()) {  // absl: "Missing the value for the flag 'flagfile'"
        names->push_back(Problem(args[i], absl::StrCat(args[i], ": no value given (--", name, "=",
                                                       name == "flagfile" ? "FILE" : "NAME,...", ")")));
        continue;
      }
      if (!has_value) ++i;  // "--flagfile FILE"
      for (absl::string_view item : absl::StrSplit(value, ',', absl::SkipEmpty())) {
        if (name != "flagfile") {
          // absl sets --NAME from $FLAGS_NAME: a name that is not one of this program's flags
          // (absl's own --flagfile, --help, ... included), and with --fromenv an unset
          // variable, were absl's "ERROR: ..." lines.
          const std::string given = absl::StrCat("--", name, "=", item);
          const std::string env = absl::StrCat("FLAGS_", item);
          const char* text = std::getenv(env.c_str());
          auto it = all.find(item);
          if (it == all.end() || it->second->Filename().find("cli/") == std::string::npos) {
            names->push_back(Problem(given, absl::StrCat(given, ": ", item, " is not a flag of this program")));
          } else if (text == nullptr && name == "fromenv") {
            names->push_back(Problem(given, absl::StrCat(given, ": ", env, " is not set in the environment (--", name,
                                                         " reads each flag named from FLAGS_<name>; --tryfromenv "
                                                         "skips those unset)")));
          } else if (text != nullptr) {
            names->push_back({std::string(it->first), text, given, true, true});
          }
          continue;
        }
        if (depth >= 8) continue;
        std::ifstream file{std::string(item)};
        std::vector<std::string> lines;
        for (std::string line; std::getline(file, line);) {
          if (absl::string_view t = absl::StripAsciiWhitespace(line); !t.empty()) lines.emplace_back(t);
        }
        CollectGivenFlags(lines, depth + 1, names);
      }
      continue;
    }
    // absl's other listings (--helpshort, --helpon=FILE, ...) and --version print absl's view
    // of the program (every command's flags by source file; "Debug build (NDEBUG not
    // #defined)") and exit, and --help=false printed "No flags matched" with status 1.
    constexpr std::string_view kAbslListings[] = {"helpshort", "helppackage", "helpon", "helpmatch", "version"};
    if (std::find(std::begin(kAbslListings), std::end(kAbslListings), std::string_view(name.data(), name.size())) !=
            std::end(kAbslListings) ||
        ((name == "help" || name == "h") && has_value && value != "true")) {
      names->push_back(Problem(args[i], absl::StrCat(args[i], ": not a flag of this command (--help lists its flags, "
                                                              "--helpfull every command's)")));
      continue;
    }
    auto it = all.find(name);
    const bool negated = it == all.end() && absl::StartsWith(name, "no");
    if (negated) it = all.find(name.substr(2));  // --noflag
    if (it == all.end()) {
      // absl's own flags, registered or not (--help, -h as PrintCommandHelpIfAsked takes it, ...).
      constexpr std::string_view kAbslOwn[] = {"help", "h", "helpfull", "helpshort", "helppackage", "helpon",
                                               "helpmatch", "version", "only_check_args", "undefok"};
      if (std::find(std::begin(kAbslOwn), std::end(kAbslOwn), std::string_view(name.data(), name.size())) ==
          std::end(kAbslOwn)) {
        names->push_back({std::string(name), "", args[i], /*known=*/false});
      }
      continue;
    }
    // "--name value" for a non-boolean flag: the next argument is the value, even if it starts with '-'.
    const bool takes_next = !has_value && !negated && !it->second->IsOfType<bool>();
    const bool next_missing = takes_next && i + 1 >= args.size();
    if (takes_next) ++i;
    if (it->second->Filename().find("cli/") == std::string::npos) continue;
    if (negated && !it->second->IsOfType<bool>()) {  // absl refuses --nosteps: kept unknown, so it is refused as such
      names->push_back({std::string(name), "", args[i], /*known=*/false});
      continue;
    }
    if (negated && has_value) {  // absl: "Negative form with assignment is not valid for the boolean flag"
      const std::string flag(it->first);
      names->push_back(Problem(args[i], absl::StrCat(args[i], ": the negative form takes no value (--no", flag,
                                                     " alone, or --", flag, "=", value, ")")));
      continue;
    }
    names->push_back({std::string(it->first), has_value || takes_next ? value : std::string(),
                      takes_next && !next_missing ? absl::StrCat(args[i - 1], " ", value) : args[i - takes_next],
                      /*known=*/true, has_value || (takes_next && !next_missing)});
  }
}

// absl reads --flagfile files itself, without a bound: a flagfile that names itself, or
// a cycle of them, is read for ever (its memory growing by GBs a minute), a directory
// reads as an empty file and a binary file as a page of errors. Each flagfile, and each
// one it names, is checked first: a regular file of at most 1 MiB, not on the chain of
// flagfiles that named it. `chain`: the flagfiles being read, outermost first.
absl::Status CheckFlagfiles(const std::vector<std::string>& args, std::vector<std::string>* chain) {
  namespace fs = std::filesystem;
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    std::string value;
    if (absl::StartsWith(arg, "flagfile=")) {
      value = std::string(arg.substr(9));
    } else if (arg == "flagfile" && i + 1 < args.size()) {
      value = args[++i];
    } else {
      continue;
    }
    for (absl::string_view item : absl::StrSplit(value, ',', absl::SkipEmpty())) {
      const std::string file(item);
      std::error_code ec;
      const std::string key = fs::weakly_canonical(file, ec).string();
      if (std::find(chain->begin(), chain->end(), key) != chain->end()) {
        return absl::InvalidArgumentError(absl::StrCat("--flagfile=", file, ": names itself (", absl::StrJoin(*chain, " -> "),
                                                       " -> ", key, "): a flagfile cycle is never done reading"));
      }
      auto text = ReadRegularFile(file, "flagfile", int64_t{1} << 20);
      if (!text.ok()) return absl::Status(text.status().code(), absl::StrCat("--flagfile=", text.status().message()));
      std::vector<std::string> lines;
      for (absl::string_view line : absl::StrSplit(*text, '\n')) {
        if (absl::string_view t = absl::StripAsciiWhitespace(line); !t.empty()) lines.emplace_back(t);
      }
      chain->push_back(key);
      MS_RETURN_IF_ERROR(CheckFlagfiles(lines, chain));
      chain->pop_back();
    }
  }
  return absl::OkStatus();
}

absl::Status CheckFlagfiles(int argc, char** argv) {
  std::vector<std::string> chain;
  return CheckFlagfiles(std::vector<std::string>(argv + std::min(argc, 1), argv + argc), &chain);
}

// Prints `flags` grouped by the file that defines them ("train flags:", "common flags:"),
// in their order, one line each with its help and the value before parsing: the flag's default, or the
// command's own (bench train's --steps).
void PrintFlagGroups(const std::vector<const absl::CommandLineFlag*>& flags) {
  std::map<std::string, std::vector<const absl::CommandLineFlag*>> groups;  // by defining file
  for (const absl::CommandLineFlag* flag : flags) {
    std::string file = std::filesystem::path(flag->Filename()).stem().string();
    if (absl::EndsWith(file, "_command")) file = file.substr(0, file.size() - 8);
    if (file == "flags") file = "common";
    groups[file].push_back(flag);
  }
  for (const auto& [group, members] : groups) {
    std::printf("\n%s flags:\n", group.c_str());
    for (const absl::CommandLineFlag* flag : members) {
      const std::string value = flag->CurrentValue();
      std::printf("  --%s  %s (default: %s)\n", std::string(flag->Name()).c_str(), flag->Help().c_str(),
                  value.empty() ? "\"\"" : value.c_str());
    }
  }
}

// `--help` (or -help) lists this command's own flags, grouped by where they are
// defined, and exits 0; absl's --help would list every command's (issue 31: 181 lines
// for `train --help`). `--helpfull` lists every command's flags the same way and exits 0
// (absl's own listing exited 1, a failure to a script, and named the build's source paths).
void PrintCommandHelpIfAsked(int argc, char** argv, const char* usage, const std::vector<std::string_view>& accepted) {
  bool asked = false, full = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    asked = asked || a == "--help" || a == "-help" || a == "--help=true" || a == "-h";
    full = full || a == "--helpfull" || a == "-helpfull";
  }
  if (!asked && !full) return;
  std::vector<const absl::CommandLineFlag*> flags;
  if (full) {
    for (const auto& [name, flag] : absl::GetAllFlags()) {
      if (flag->Filename().find("cli/") != std::string::npos) flags.push_back(flag);
    }
    std::sort(flags.begin(), flags.end(),
              [](const absl::CommandLineFlag* a, const absl::CommandLineFlag* b) { return a->Name() < b->Name(); });
  } else {
    for (std::string_view name : accepted) {
      const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(absl::string_view(name.data(), name.size()));
      if (flag != nullptr) flags.push_back(flag);
    }
  }
  std::printf("%s\n", usage);
  if (full) std::printf("\nEvery command's flags (--help lists this command's own):\n");
  PrintFlagGroups(flags);
  if (!full) std::printf("\n--helpfull lists the flags of every command.\n");
  std::exit(WithStdoutFlushed("--help", 0));
}

}  // namespace

namespace {

// Every flag given (with CheckSpecialForms' problems, which GivenFlags leaves out).
std::vector<GivenFlag> AllGiven(int argc, char** argv) {
  std::vector<GivenFlag> given;
  CollectGivenFlags(std::vector<std::string>(argv + std::min(argc, 1), argv + argc), 0, &given);
  return given;
}

// The flags given, without the ways of giving them that CheckSpecialForms refuses.
std::vector<GivenFlag> GivenFlagsAndValues(int argc, char** argv) {
  std::vector<GivenFlag> given = AllGiven(argc, argv);
  given.erase(std::remove_if(given.begin(), given.end(), [](const GivenFlag& f) { return !f.problem.empty(); }),
              given.end());
  return given;
}

// Forms absl would refuse with "ERROR: ..." lines of its own: a negated boolean given a
// value (--nojson=1), --fromenv/--tryfromenv naming what is not a flag of this program or
// (--fromenv) a variable that is not set, --flagfile/--fromenv/--tryfromenv with nothing
// after them. The first is refused in one line of ours.
absl::Status CheckSpecialForms(int argc, char** argv) {
  for (const GivenFlag& f : AllGiven(argc, argv)) {
    if (!f.problem.empty()) return absl::InvalidArgumentError(f.problem);
  }
  return absl::OkStatus();
}

// The double flags that also take "inf" (what it means is in their help).
constexpr std::string_view kFlagsTakingInf[] = {"w"};

// absl reads a double flag with strtod's rules, so --lr=0x1p-4, --min_seconds=inf and
// --dp_bucket_mb=" 16" were taken. Every double flag given must be a plain decimal
// (common/decimal.h), checked here before absl reads it so that the error is ours, one line.
absl::Status CheckDecimalFlags(int argc, char** argv) {
  for (const GivenFlag& f : GivenFlagsAndValues(argc, argv)) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(f.name);
    if (flag == nullptr || !flag->IsOfType<double>()) continue;
    const bool takes_inf = std::find(std::begin(kFlagsTakingInf), std::end(kFlagsTakingInf), f.name) !=
                           std::end(kFlagsTakingInf);
    double unused;
    if (ParseDecimal(f.value, &unused) || (takes_inf && f.value == "inf")) continue;
    return absl::InvalidArgumentError(absl::StrCat("--", f.name, "=", f.value,
                                                   ": expected a decimal number (e.g. 16, 0.0625 or 1e-3",
                                                   takes_inf ? ") or inf (no hex, nan or blanks)"
                                                             : "; no hex, inf, nan or blanks)"));
  }
  return absl::OkStatus();
}

// absl reads an integer flag with base detection and blanks stripped, so --steps=0x3 ran 3
// steps, --steps=" 3" and --seed=+7 were taken, and a typo of hex digits could read as a
// count. Every integer flag given must be decimal digits with an optional leading '-',
// checked before absl reads it so that the error is ours, one line naming the flag. (A
// value absl cannot read at all, --steps=abc or past the type's range, is CheckFlagValues'
// error, checked first.)
absl::Status CheckIntegerFlags(int argc, char** argv) {
  for (const GivenFlag& f : GivenFlagsAndValues(argc, argv)) {
    if (!f.known || !f.has_value) continue;
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(f.name);
    if (flag == nullptr || !(flag->IsOfType<int32_t>() || flag->IsOfType<int64_t>() || flag->IsOfType<uint32_t>() ||
                             flag->IsOfType<uint64_t>())) {
      continue;
    }
    if (IsDecimalInteger(f.value)) continue;
    return absl::InvalidArgumentError(absl::StrCat("--", f.name, "=", f.value,
                                                   ": expected an integer in decimal digits (e.g. 3 or -1; no hex, "
                                                   "'+' or blanks)"));
  }
  return absl::OkStatus();
}

// What a flag of this type takes, for CheckFlagValues' message.
std::string ExpectedValue(const absl::CommandLineFlag& flag) {
  const std::string name(flag.Name());
  if (flag.IsOfType<bool>()) return absl::StrCat("true or false (or --", name, ", --no", name, ")");
  if (flag.IsOfType<int32_t>()) return "an integer from -2147483648 to 2147483647";
  if (flag.IsOfType<int64_t>()) return "an integer from -2^63 to 2^63 - 1";
  if (flag.IsOfType<uint32_t>()) return "an integer from 0 to 4294967295";
  if (flag.IsOfType<uint64_t>()) return "an integer from 0 to 2^64 - 1";
  return "a value";
}

// absl reports a value it cannot read (--steps=abc, --json=maybe, a trailing --steps) as
// "ERROR: Illegal value ..." and exits, without the command's name: every given value is
// read here first, so that the error is ours, one line naming the flag. (Reading it sets
// the flag; absl sets it again from the same text.)
absl::Status CheckFlagValues(int argc, char** argv) {
  for (const GivenFlag& f : GivenFlagsAndValues(argc, argv)) {
    if (!f.known) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(f.name);
    if (flag == nullptr) continue;
    if (!f.has_value) {
      if (flag->IsOfType<bool>()) continue;  // --json, --nojson
      return absl::InvalidArgumentError(
          absl::StrCat(f.arg, ": no value given (--", f.name, "=VALUE; expected ", ExpectedValue(*flag), ")"));
    }
    std::string error;
    if (!flag->ParseFrom(f.value, &error)) {
      return absl::InvalidArgumentError(absl::StrCat(f.arg, ": expected ", ExpectedValue(*flag)));
    }
  }
  return absl::OkStatus();
}

// absl keeps the last value of a flag given twice, so `prepare --input=a --input=b` read
// b alone and `--lr=1 ... --lr=2` trained at 2 without a word. No flag of ours adds up
// repeated values: a flag given more than once (on the command line, in flagfiles or
// through --fromenv) is refused, naming both.
absl::Status CheckRepeatedFlags(int argc, char** argv) {
  const std::vector<GivenFlag> given = GivenFlagsAndValues(argc, argv);
  for (size_t i = 0; i < given.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (given[j].name != given[i].name) continue;
      const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(given[i].name);
      const bool list = flag != nullptr && flag->IsOfType<std::vector<std::string>>();
      return absl::InvalidArgumentError(absl::StrCat(
          "--", given[i].name, " is given twice (", given[j].arg, ", then ", given[i].arg,
          "): a flag takes one value and the last would silently replace the first; give it once",
          list ? absl::StrCat(", its values comma-separated (--", given[i].name, "=A,B)") : ""));
    }
  }
  return absl::OkStatus();
}

// MULTISCREEN_ISA, unless --isa overrides it: a bad value is the user's error like a bad
// flag, one line and exit 1 (said once by rank 0 under a launcher), where the kernels'
// first use ended every rank with "error: ..." and exit 2 (issue 43).
absl::Status CheckIsaVariable() {
  return absl::GetFlag(FLAGS_isa).empty() ? kernels::cpu::CheckIsaEnvironment() : absl::OkStatus();
}

// Everything absl would report itself as "ERROR: ..." (and exit) is checked first, so that
// a command's flag errors are one line of ours, "multiscreen CMD: --flag...": the
// flagfiles, a flag that is not this command's (or no flag at all), the values.
absl::Status CheckFlagsBeforeAbsl(int argc, char** argv, const char* usage,
                                  const std::vector<std::string_view>& accepted) {
  MS_RETURN_IF_ERROR(CheckFlagfiles(argc, argv));
  MS_RETURN_IF_ERROR(CheckSpecialForms(argc, argv));
  MS_RETURN_IF_ERROR(RefuseOtherFlags(argc, argv, usage, accepted));
  MS_RETURN_IF_ERROR(CheckDecimalFlags(argc, argv));
  MS_RETURN_IF_ERROR(CheckRepeatedFlags(argc, argv));
  MS_RETURN_IF_ERROR(CheckFlagValues(argc, argv));
  return CheckIntegerFlags(argc, argv);
}

}  // namespace

std::vector<std::string> GivenFlags(int argc, char** argv) {
  std::vector<std::string> names;
  for (GivenFlag& f : GivenFlagsAndValues(argc, argv)) names.push_back(std::move(f.name));
  return names;
}

bool Given(const std::vector<std::string>& given, std::string_view name) {
  return std::find(given.begin(), given.end(), name) != given.end();
}

absl::Status ParseFlags(int argc, char** argv, const char* usage, std::initializer_list<std::string_view> accepted_list) {
  const std::vector<std::string_view> accepted(accepted_list);
  SetUsage(usage);
  PrintCommandHelpIfAsked(argc, argv, usage, accepted);
  MS_RETURN_IF_ERROR(CheckFlagsBeforeAbsl(argc, argv, usage, accepted));
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", rest[1], "' (flags are --name=value)"));
  }
  return CheckIsaVariable();
}

absl::Status ParseFlagsAndArgs(int argc, char** argv, const char* usage, std::initializer_list<std::string_view> accepted,
                               std::vector<std::string>* args) {
  return ParseFlagsAndArgs(argc, argv, usage, std::vector<std::string_view>(accepted), args);
}

absl::Status ParseFlagsAndArgs(int argc, char** argv, const char* usage, const std::vector<std::string_view>& accepted,
                               std::vector<std::string>* args) {
  SetUsage(usage);
  PrintCommandHelpIfAsked(argc, argv, usage, accepted);
  MS_RETURN_IF_ERROR(CheckFlagsBeforeAbsl(argc, argv, usage, accepted));
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  args->assign(rest.begin() + 1, rest.end());
  return CheckIsaVariable();
}

bool IsDecimalInteger(std::string_view text) {
  const std::string_view digits = !text.empty() && text[0] == '-' ? text.substr(1) : text;
  return !digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

absl::StatusOr<std::vector<std::string>> SplitListFlag(std::string_view flag, const std::string& text) {
  std::vector<std::string> values;
  if (text.empty()) return values;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    const std::string named = absl::StrCat("--", std::string(flag), "=", text);
    if (part.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(named, ": an empty value (values are comma-separated, e.g. --",
                                                     std::string(flag), "=A,B)"));
    }
    if (std::any_of(part.begin(), part.end(), [](char c) { return absl::ascii_isspace(static_cast<unsigned char>(c)); })) {
      return absl::InvalidArgumentError(absl::StrCat(named, ": '", part, "' holds a blank (values are comma-separated "
                                                     "without blanks, e.g. --", std::string(flag), "=A,B)"));
    }
    values.emplace_back(part);
  }
  return values;
}

absl::Status ApplyThreadsFlag() {
  const int32_t threads = absl::GetFlag(FLAGS_threads);
  // prepare's bound too: more OpenMP threads than any machine has cores only thrashes.
  if (threads < 0 || threads > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("--threads=", threads, ": expected 0 (all cores) to 1024"));
  }
  if (threads > 0) omp_set_num_threads(threads);
  return absl::OkStatus();
}

absl::Status ApplyIsaFlag() {
  const std::string name = absl::GetFlag(FLAGS_isa);
  if (name.empty()) return absl::OkStatus();  // MULTISCREEN_ISA, checked by ParseFlags
  if (absl::Status s = kernels::cpu::SetIsaCap(name); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--isa=", name, ": ", s.message()));
  }
  return absl::OkStatus();
}

int WithStdoutFlushed(const char* command, int rc) {
  errno = 0;  // the first failed write's error (cout's flush writes through stdout's buffer)
  std::cout.flush();
  const bool failed = std::fflush(stdout) != 0 || std::ferror(stdout) != 0 || std::cout.bad();
  if (!failed || rc != 0) return rc;  // a command that failed has said why (generate: its own write error)
  const int error = errno;
  std::fprintf(stderr, "multiscreen %s: cannot write the standard output%s%s\n", command, error != 0 ? ": " : "",
               error != 0 ? std::strerror(error) : "");
  return 1;
}

std::string OneLine(const std::string& raw) {
  // Bytes that are not UTF-8 first (a file name, a line quoted from a file), as \xNN:
  // a terminal would show them as garbage or take them for a control sequence.
  std::string message;
  message.reserve(raw.size());
  for (std::string_view rest = raw; !rest.empty();) {
    const int64_t bad = FindInvalidUtf8(rest);
    if (bad < 0) {
      message += rest;
      break;
    }
    message += rest.substr(0, bad);
    message += absl::StrFormat("\\x%02x", static_cast<unsigned char>(rest[bad]));
    rest.remove_prefix(bad + 1);
  }
  std::string out;
  out.reserve(message.size());
  for (size_t i = 0; i < message.size(); ++i) {
    const auto c = static_cast<unsigned char>(message[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += absl::StrFormat("\\x%02x", c);
    } else if (c == 0xc2 && i + 1 < message.size() && static_cast<unsigned char>(message[i + 1]) == 0x85) {
      out += "\\u0085";  // NEL
      ++i;
    } else if (c == 0xe2 && i + 2 < message.size() && static_cast<unsigned char>(message[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(message[i + 2]) & 0xfe) == 0xa8) {
      out += static_cast<unsigned char>(message[i + 2]) == 0xa8 ? "\\u2028" : "\\u2029";  // line, paragraph separator
      i += 2;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

absl::StatusOr<int64_t> ParseByteSize(std::string_view flag, const std::string& text) {
  std::string digits = text, suffix;
  const size_t cut = text.find_first_not_of("0123456789");
  if (cut != std::string::npos) {
    digits = text.substr(0, cut);
    suffix = absl::AsciiStrToUpper(text.substr(cut));
  }
  int shift = -1;
  if (suffix.empty() || suffix == "B") shift = 0;
  for (const auto& [letter, bits] : {std::pair{'K', 10}, {'M', 20}, {'G', 30}, {'T', 40}}) {
    if (suffix == std::string(1, letter) || suffix == absl::StrCat(std::string(1, letter), "IB")) shift = bits;
  }
  int64_t value = 0;
  if (!digits.empty() && shift >= 0 && (!absl::SimpleAtoi(digits, &value) || value > (INT64_MAX >> shift))) {
    return absl::InvalidArgumentError(  // digits only: SimpleAtoi fails on overflow alone
        absl::StrCat("--", std::string(flag), "=", text, ": too large (at most 2^63 - 1 bytes, 8 EiB)"));
  }
  if (digits.empty() || shift < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", std::string(flag), "=", text, ": expected bytes with an optional K, M, G or T suffix (e.g. 1G)"));
  }
  return value << shift;
}

namespace {

// The file that marks `dir` as a training run's directory: "run.json", else
// "metrics.jsonl" (a run whose run.json is not written yet), else "" (none of a run's).
std::string RunMark(const std::filesystem::path& dir) {
  std::error_code ec;
  for (const char* mark : {"run.json", "metrics.jsonl"}) {
    if (std::filesystem::exists(dir / mark, ec)) return mark;
  }
  return "";
}

}  // namespace

absl::Status CheckOutputPath(const std::string& flag, const std::string& out, std::initializer_list<std::string> inputs,
                             bool out_is_directory) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const std::string& in : inputs) {
    if (!in.empty() && fs::exists(out, ec) && fs::exists(in, ec) && fs::equivalent(out, in, ec)) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", out, " is the input ", in,
                                                     ": writing it would destroy what is read; choose another path"));
    }
  }
  const fs::path resolved = fs::weakly_canonical(fs::path(out), ec);
  // A training run's own files (trainer/run_files.h): a field report's `eval passkey
  // --dump=RUN/run.json` replaced the run's identity.
  const fs::path parent = resolved.parent_path();
  if (!out_is_directory && std::find(std::begin(kRunFiles), std::end(kRunFiles), resolved.filename().string()) !=
                               std::end(kRunFiles) &&
      !RunMark(parent).empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", out, " is a file of the training run in ",
                                                   parent.string(), ": choose another path"));
  }
  // A run's directory as an output directory: results went among the run's files (and a
  // name such as status.json replaced the run's own).
  if (const std::string mark = out_is_directory ? RunMark(resolved) : ""; !mark.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", out, " is a training run's directory (it holds ",
                                                   mark, "): write into a directory of its own (e.g. ",
                                                   (fs::path(out) / "eval").string(), ")"));
  }
  if (const fs::path dir = EnclosingCheckpointDirectory(out_is_directory ? resolved : parent, false); !dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", out, " lies inside the checkpoint directory ",
                                                   dir.string(), ": choose a path outside it"));
  }
  return absl::OkStatus();
}

std::filesystem::path EnclosingCheckpointDirectory(const std::filesystem::path& start, bool checkpoints_of_a_run) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (fs::path dir = start; !dir.empty(); dir = dir.parent_path()) {
    const fs::path parent = dir.parent_path();
    const bool checkpoints = dir.filename() == "checkpoints" && (!checkpoints_of_a_run || !RunMark(parent).empty());
    if (checkpoints || fs::exists(dir / "manifest.json", ec)) return dir;
    if (dir == dir.root_path()) break;
  }
  return {};
}

absl::Status CheckOutputFile(const std::string& flag, const std::string& out, std::initializer_list<std::string> inputs) {
  MS_RETURN_IF_ERROR(CheckReplaceableOutput(absl::StrCat("--", flag), out));
  return CheckOutputPath(flag, out, inputs);
}

int Fail(const char* command, const absl::Status& status) {
  std::fprintf(stderr, "multiscreen %s: %s\n", command, OneLine(std::string(status.message())).c_str());
  return 1;
}

int RefuseSeveralProcesses(const char* command) {
  bool quiet = false;
  const absl::Status s = RequireSingleProcess(command, &quiet);
  if (s.ok()) return 0;
  return quiet ? 1 : Fail(command, s);
}

}  // namespace multiscreen::cli
