// `multiscreen prepare --tokenizer=DIR --input=FILES... --output=DIR`: text, JSONL and
// JSON-array corpora (plain, .gz, .zst) -> llm.c token shards (data/prepare.h).
// Inputs are comma-separated and/or follow the flags (so a shell glob works).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/commands.h"
#include "cli/created_dirs.h"
#include "cli/flags.h"
#include "data/gpt2_tokenizer.h"
#include "data/prepare.h"
#include "trainer/stop_signal.h"

ABSL_FLAG(std::string, text_field, "text", "JSONL / JSON-object field holding a document's text");
ABSL_FLAG(std::string, input_format, "auto", "auto (from the file name) | text | jsonl | json");
ABSL_FLAG(int64_t, shard_tokens, 100'000'000, "tokens per train shard");
ABSL_FLAG(int64_t, val_tokens, 131'072, "held-out tokens (whole documents) in val_000000.bin; 0: none");
ABSL_FLAG(bool, strict_utf8, false,
          "refuse invalid UTF-8 and JSON escapes of lone surrogates (FILE:LINE and byte) instead of replacing "
          "them by U+FFFD");
ABSL_FLAG(std::string, max_document_bytes, "1G",
          "the longest document (a JSONL line, a whole plain-text file) read into memory, in bytes (K, M, G, T "
          "suffixes are powers of 1024); a longer one is an error naming the file and line");

namespace multiscreen::cli {
namespace {

// One line per file whose invalid UTF-8 or lone surrogate escapes were replaced by
// U+FFFD (the first 20 files, then how many more), after a line with the total.
void PrintReplacements(const PrepareSummary& s) {
  if (s.replacements == 0) return;
  std::printf("prepare: replaced %lld invalid UTF-8 sequence%s or lone surrogate escape%s by U+FFFD in %zu file%s "
              "(--strict_utf8 refuses them):\n",
              static_cast<long long>(s.replacements), s.replacements == 1 ? "" : "s", s.replacements == 1 ? "" : "s",
              s.replaced_files.size(), s.replaced_files.size() == 1 ? "" : "s");
  constexpr size_t kShown = 20;
  for (size_t i = 0; i < s.replaced_files.size() && i < kShown; ++i) {
    std::printf("  %s: %lld\n", s.replaced_files[i].first.c_str(), static_cast<long long>(s.replaced_files[i].second));
  }
  if (s.replaced_files.size() > kShown) std::printf("  ... and %zu more files\n", s.replaced_files.size() - kShown);
}

}  // namespace

int PrepareCommand(int argc, char** argv) {
  // From the first instant, SIGINT / SIGTERM (and SIGHUP, SIGUSR1) stop the run between
  // reads, removing the partial *.tmp shards (a reader waiting on a pipe or FIFO with no
  // data stops within 200 ms); a second SIGINT exits at once (the *.tmp files then stay,
  // each with a zero header: never a valid shard).
  InstallStopHandlers();
  std::vector<std::string> args;
  if (auto s = ParseFlagsAndArgs(
          argc, argv, "multiscreen prepare --tokenizer=DIR --input=FILE[,FILE...] [FILE...] --output=DIR",
          {"tokenizer", "input", "output", "input_format", "text_field", "shard_tokens", "val_tokens", "threads",
           "strict_utf8", "max_document_bytes"},
          &args);
      !s.ok()) {
    return Fail("prepare", s);
  }
  // One process: under `mpirun -n 2` every rank wrote the same shards into --output.
  if (int rc = RefuseSeveralProcesses("prepare"); rc != 0) return rc;
  PrepareOptions options;
  options.inputs = absl::GetFlag(FLAGS_input);
  options.inputs.insert(options.inputs.end(), args.begin(), args.end());
  options.output_dir = absl::GetFlag(FLAGS_output);
  options.read.text_field = absl::GetFlag(FLAGS_text_field);
  auto format = ParseInputFormat(absl::GetFlag(FLAGS_input_format));
  if (!format.ok()) return Fail("prepare", absl::InvalidArgumentError(absl::StrCat("--", format.status().message())));
  options.read.format = *format;
  options.read.strict_utf8 = absl::GetFlag(FLAGS_strict_utf8);
  auto max_document_bytes = ParseByteSize("max_document_bytes", absl::GetFlag(FLAGS_max_document_bytes));
  if (!max_document_bytes.ok()) return Fail("prepare", max_document_bytes.status());
  options.read.max_document_bytes = *max_document_bytes;
  if (options.read.max_document_bytes < 1) {
    return Fail("prepare", absl::InvalidArgumentError(absl::StrCat(
                               "--max_document_bytes=", absl::GetFlag(FLAGS_max_document_bytes), ": expected at least 1")));
  }
  options.shard_tokens = absl::GetFlag(FLAGS_shard_tokens);
  options.val_tokens = absl::GetFlag(FLAGS_val_tokens);
  options.threads = absl::GetFlag(FLAGS_threads);
  if (options.threads < 0 || options.threads > 1024) {
    return Fail("prepare", absl::InvalidArgumentError(
                               absl::StrCat("--threads=", options.threads, ": expected 0 (all cores) to 1024")));
  }
  if (options.inputs.empty()) return Fail("prepare", absl::InvalidArgumentError("--input=FILES is required"));
  if (options.output_dir.empty()) return Fail("prepare", absl::InvalidArgumentError("--output=DIR is required"));
  // Not into a checkpoint (a run's retention would delete the shards with it) or a run's files.
  if (auto s = CheckOutputPath("output", options.output_dir, {}, /*out_is_directory=*/true); !s.ok()) {
    return Fail("prepare", s);
  }

  auto tok = Gpt2Tokenizer::Load(absl::GetFlag(FLAGS_tokenizer));
  if (!tok.ok()) return Fail("prepare", tok.status());

  // Progress once a run has taken 3 s: on a terminal one line rewritten 5 times a
  // second, elsewhere (a log file, Slurm's output) a line every 10 s, as train logs.
  const bool terminal = isatty(fileno(stderr)) != 0;
  bool printed = false;
  double last_line = -1e9;
  options.on_progress = [&](const PrepareProgress& p) {
    if (p.seconds < 3 || (!terminal && p.seconds - last_line < 10)) return;
    last_line = p.seconds;
    const double mb = p.bytes / 1e6;
    std::string eta = "?";
    if (p.input_bytes_total > 0 && p.input_bytes_done > 0) {
      const double left = p.seconds * double(p.input_bytes_total - p.input_bytes_done) / double(p.input_bytes_done);
      eta = absl::StrFormat("%dm%02ds", static_cast<int>(left) / 60, static_cast<int>(left) % 60);
    }
    std::fprintf(stderr, "%sprepare: %.1f MB%s, %lld documents, %lld tokens, %.1f MB/s, ETA %s%s",
                 terminal ? "\r" : "", mb,
                 p.input_bytes_total > 0
                     ? absl::StrFormat(" (%.0f%% of %.1f MB)", 100.0 * double(p.input_bytes_done) / double(p.input_bytes_total),
                                       double(p.input_bytes_total) / 1e6)
                           .c_str()
                     : "",
                 static_cast<long long>(p.documents), static_cast<long long>(p.tokens),
                 p.seconds > 0 ? mb / p.seconds : 0.0, eta.c_str(), terminal ? "   " : "\n");
    std::fflush(stderr);
    printed = terminal;
  };
  options.cancelled = [] { return StopRequested(); };
  options.on_notice = [](const std::string& line) { std::fprintf(stderr, "prepare: %s\n", line.c_str()); };
  const std::filesystem::path created = FirstMissingDir(options.output_dir);
  auto summary = Prepare(**tok, options);
  if (printed) std::fprintf(stderr, "\n");
  if (!summary.ok()) {
    RemoveCreatedDirs(options.output_dir, created);  // a failed prepare leaves no empty --output behind
    return Fail("prepare", summary.status());
  }
  const PrepareSummary& s = *summary;
  std::printf("prepare: %lld documents, %lld tokens: train %lld in %zu shard%s, val %lld (%lld documents)%s; "
              "%.1f MB in %.1f s (%.1f MB/s) -> %s\n",
              static_cast<long long>(s.documents), static_cast<long long>(s.tokens),
              static_cast<long long>(s.train_tokens), s.train_shards.size(), s.train_shards.size() == 1 ? "" : "s",
              static_cast<long long>(s.val_tokens), static_cast<long long>(s.val_documents),
              s.val_shard.empty() ? " (no val shard)" : " in val_000000.bin", s.bytes / 1e6, s.seconds,
              s.seconds > 0 ? s.bytes / 1e6 / s.seconds : 0.0, options.output_dir.c_str());
  PrintReplacements(s);
  return 0;
}

}  // namespace multiscreen::cli
