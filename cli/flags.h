// Flag parsing shared by the subcommands: absl flags, positional arguments refused.
#pragma once

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Flags shared by several subcommands (absl flags are process-global).
ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, out);
ABSL_DECLARE_FLAG(int64_t, seed);
ABSL_DECLARE_FLAG(int64_t, micro_batch);
ABSL_DECLARE_FLAG(int64_t, seq_len);
ABSL_DECLARE_FLAG(std::string, precision);
ABSL_DECLARE_FLAG(std::string, tokenizer);
ABSL_DECLARE_FLAG(std::vector<std::string>, input);
ABSL_DECLARE_FLAG(std::string, output);
ABSL_DECLARE_FLAG(int32_t, threads);
ABSL_DECLARE_FLAG(std::string, isa);

namespace multiscreen::cli {

// Parses absl flags from argv (argv[0] is the subcommand name). Returns an
// error naming a stray positional argument, or a flag given that is not in
// `accepted` (another subcommand's), or a --flagfile (or one it names) that is not a
// regular file of at most 1 MiB or that names itself through a cycle (absl would read it
// for ever), or a floating-point flag whose text is not a plain decimal number
// (common/decimal.h: absl reads doubles as strtod does, so "0x10", "inf", "nan" and " 2"
// were taken; bench's --w also takes "inf"), or an integer flag whose text is not decimal
// digits with an optional leading '-' (absl took "0x3", " 3" and "+3"), or a flag given twice (on the command line,
// in flagfiles or through --fromenv: absl would keep the last value without a word), or a
// value absl cannot read (--steps=abc, --json=maybe, --steps with nothing after it), a
// negated boolean given a value (--nojson=1), --fromenv/--tryfromenv naming what is not a
// flag of this program or (--fromenv) an unset FLAGS_<name>, or an unknown flag, which
// absl would report as "ERROR: ..." without the command's name; and, without --isa, a
// MULTISCREEN_ISA that names no path this CPU runs (the kernels' first use ended the
// process with exit 2 on it).
// Every such error is one line, naming the flag as given, for Fail's "multiscreen CMD: ".
// --help (-h) prints the accepted flags with their defaults (the value before parsing, so
// a command's own default set with absl::SetFlag first) and exits 0.
absl::Status ParseFlags(int argc, char** argv, const char* usage, std::initializer_list<std::string_view> accepted);

// As ParseFlags, but positional arguments are returned in `args` instead of refused.
absl::Status ParseFlagsAndArgs(int argc, char** argv, const char* usage, std::initializer_list<std::string_view> accepted,
                               std::vector<std::string>* args);
absl::Status ParseFlagsAndArgs(int argc, char** argv, const char* usage, const std::vector<std::string_view>& accepted,
                               std::vector<std::string>* args);

// The names of this program's flags given in argv (--name, --name=v, --name v, -name,
// --noname), in order, including those set through --flagfile files and
// --fromenv/--tryfromenv; absl's own flags (--help, --flagfile, ...) are left out.
std::vector<std::string> GivenFlags(int argc, char** argv);

// Whether --name is among `given` (GivenFlags' result), e.g. so that it overrides a
// run file's value.
bool Given(const std::vector<std::string>& given, std::string_view name);

// True when `text` is decimal digits with an optional leading '-': what integer flags, and
// the integers of list flags (--contexts=320,640), take (no hex, '+' or blanks).
bool IsDecimalInteger(std::string_view text);

// The values of a list flag given as `--flag=text` ("0.1,0.5,0.9"): `text` split at its
// commas. Errors (one line, naming the flag and its text): an empty value ("0.1,,0.5", a
// trailing comma) or one with blanks ("0.1, 0.5": the lists are comma-separated without
// blanks, docs/commands.md). An empty `text` is no values.
absl::StatusOr<std::vector<std::string>> SplitListFlag(std::string_view flag, const std::string& text);

// --threads: OpenMP's (and so OpenBLAS's) thread count; 0 keeps the default
// (OMP_NUM_THREADS, else every core). Errors: a negative count.
absl::Status ApplyThreadsFlag();

// --isa: caps the CPU kernels to that instruction-set path (kernels/cpu/isa.h); unset
// keeps MULTISCREEN_ISA or the CPU's best. Errors: an unknown name, a path the CPU lacks.
absl::Status ApplyIsaFlag();

// A byte count given as `--flag=text`: digits with an optional binary suffix (K, M, G, T,
// with or without "iB", any case; "1G" = 2^30; "B" or none = bytes). Errors (one line,
// naming the flag): no digits, an unknown suffix, a value past int64 ("too large"). Used by --memory
// (cli/memory_bound.h) and prepare's --max_document_bytes.
absl::StatusOr<int64_t> ParseByteSize(std::string_view flag, const std::string& text);

// Refuses an output path (`flag`=`out`) that would overwrite one of `inputs` (the same
// file, through any link), is one of a training run's own files (run.json, metrics.jsonl,
// ... in a directory holding a run), or lies inside a checkpoint (a directory holding
// manifest.json, or anywhere under a `checkpoints` directory), so that a command never
// replaces what it reads, a run's records or a run's checkpoint.
// `out_is_directory`: `out` is a directory the command writes its files into (eval's
// --out), so `out` itself may not be a checkpoint, a `checkpoints` directory or a run's
// directory (one holding run.json or metrics.jsonl) either.
absl::Status CheckOutputPath(const std::string& flag, const std::string& out, std::initializer_list<std::string> inputs,
                             bool out_is_directory = false);

// The checkpoint directory that `start` (an absolute, resolved path) is or lies in: the
// nearest of it and its parents that holds manifest.json (a checkpoint) or is named
// `checkpoints` (with checkpoints_of_a_run, only one whose parent holds a run: run.json or
// metrics.jsonl); empty when none. CheckOutputPath's rule, and train's for --run_dir.
std::filesystem::path EnclosingCheckpointDirectory(const std::filesystem::path& start, bool checkpoints_of_a_run);

// An output file (`flag`=`out`, written beside it and renamed into place): refused where it
// exists as a directory, FIFO or device (CheckReplaceableOutput, common/input_file.h), and
// then as CheckOutputPath.
absl::Status CheckOutputFile(const std::string& flag, const std::string& out, std::initializer_list<std::string> inputs);

// Prints "multiscreen <command>: <message>" on stderr and returns 1.
int Fail(const char* command, const absl::Status& status);

// For a command that runs in one process (eval, forward, generate, init, ckpt, prepare):
// 0 when no launcher, or a launcher of one process, started it; else 1, the exit code to
// return, after RequireSingleProcess's line (parallel/launcher.h) from the launcher's rank 0
// only (every other rank exits 1 without a word), before anything is written.
int RefuseSeveralProcesses(const char* command);

// A command's exit status once its standard output is flushed: a write that failed (a full
// disk or /dev/full, a closed descriptor) makes a command that succeeded (`rc` 0) exit 1
// with one line naming the error, "multiscreen COMMAND: cannot write the standard output:
// REASON" (coreutils' close_stdout), so `params --json > f.json` on a full disk is not taken
// for a result; a command that failed already said why and keeps `rc`. (A closed pipe stops
// the process with SIGPIPE first.) main() applies it to every command, --help to itself.
int WithStdoutFlushed(const char* command, int rc);

// `message` made one line of UTF-8 whatever it quotes from a file: bytes that are not
// UTF-8 (a file name, a line of a corrupt file) as \xNN, control characters as \n, \r,
// \t or \xNN, and the Unicode line breaks NEL, U+2028 and U+2029 as \uNNNN. Fail and
// main's last-resort handler print through it.
std::string OneLine(const std::string& message);

}  // namespace multiscreen::cli
