// `multiscreen prepare`: text corpora -> GPT-2 token shards in llm.c's .bin layout.
//
// Inputs (format from the name, in any case, after stripping .gz / .zst, which are decompressed):
//   *.jsonl, *.ndjson   one JSON object per line, the document in a string field
//                       (`text` by default); blank lines are allowed and skipped.
//   *.json              a JSON array whose elements are strings (each a document) or
//                       objects with the text field; a .json file that starts with '{'
//                       is read as JSONL.
//   anything else       plain UTF-8 text, the whole file one document.
// A directory stands for the regular files directly in it (not hidden), sorted by name: it
// is not read recursively (its subdirectories, FIFOs and sockets are named in a notice),
// and a broken symbolic link in it is an error. A file named twice is read once, at its
// first place (ExpandInputs). A file that is not text is refused before any work, naming
// it: an llm.c shard, a Megatron .idx or .bin (by its .idx), gzip or zstd data under a
// plain name, anything with a NUL byte (in its first 64 KiB, or met later as it is read).
//
// Output: every document's tokens followed by EOS, in input order. The first documents
// go to the held-out `val_000000.bin` until it holds at least `val_tokens` tokens; the
// rest fill `train_000000.bin`, `train_000001.bin`, ... of exactly `shard_tokens` tokens
// (the last one shorter; documents may continue into the next shard). Shards are version
// 1 (uint16) when the vocabulary fits 65,536 ids, else version 2 (uint32). The output
// is a pure function of the inputs and options (not of the thread count): re-running
// gives byte-identical shards. Shards are written as *.tmp (with a zero header until
// finished, so that a cut-off one is never a valid llm.c file) and renamed only when all
// succeeded; stale shards of a previous, longer run in the same directory are removed.
//
// Threads: the input units (SplitInputs: whole files, large uncompressed JSONL files in
// pieces) are read by up to `threads` reader threads at once, each unit into chunks of
// documents that `threads` tokenizer threads encode; one writer takes the chunks in
// input order.
//
// Invalid UTF-8 and JSON escapes of lone UTF-16 surrogates ("\udbc0") are replaced by
// U+FFFD (data/utf8.h: what Python's errors="replace" and tiktoken do), counted per file
// in the summary; with `strict_utf8` they are errors instead.
//
// Errors are one line naming the file (and line for JSONL, element for JSON arrays):
// unreadable or empty input, malformed JSON, a missing or non-string text field,
// corrupt compressed data; with `strict_utf8`, "FILE:LINE: invalid UTF-8 at file byte N"
// or "FILE:LINE: lone surrogate escape \udbc0 at file byte N" (N counted from the start
// of the decompressed file).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "data/gpt2_tokenizer.h"

namespace multiscreen {

enum class InputFormat { kAuto, kText, kJsonl, kJsonArray };

// Parses "auto" | "text" | "jsonl" | "json".
absl::StatusOr<InputFormat> ParseInputFormat(const std::string& name);

struct ReadOptions {
  InputFormat format = InputFormat::kAuto;  // kAuto: from the file name (see above)
  std::string text_field = "text";          // JSONL / JSON-object field holding the text
  bool strict_utf8 = false;                 // refuse invalid UTF-8 / lone surrogates, not replace them
  // The longest document (a JSONL line, a whole plain-text file) read into memory; past it
  // the read stops with an error naming the file and line (--max_document_bytes), so that
  // an endless newline-less stream (/dev/zero, a binary file under a .jsonl name) is one
  // line instead of exhausting memory.
  int64_t max_document_bytes = int64_t{1} << 30;
  // Polled between reads (and every 200 ms while a pipe or FIFO has no data): true stops
  // the read with a Cancelled error. Null: never.
  std::function<bool()> cancelled;
};

struct ReadStats {
  int64_t documents = 0;
  int64_t replacements = 0;  // U+FFFD put in place of invalid UTF-8 or lone surrogate escapes
};

// Called once per document in file order. `where` locates it for error messages
// ("FILE", "FILE:LINE" or "FILE[INDEX]"). A non-OK return stops the read and is returned.
using DocumentFn = std::function<absl::Status(std::string text, const std::string& where)>;

// Reads the documents of one input file (decompressing .gz / .zst), each as valid UTF-8.
// Errors as above; a file with no documents (zero bytes, an empty array, only blank
// lines) is an error.
absl::StatusOr<ReadStats> ReadDocuments(const std::string& path, const ReadOptions& options,
                                        const DocumentFn& on_document);

// Expands directories in `inputs` (see above) and drops a file named twice (by itself and
// through its directory, by two spellings, through a link: the same device and inode),
// keeping its first place. `notices` (may be null) gets one line per duplicate dropped and
// per directory that holds entries it skipped (subdirectories, FIFOs, sockets). Errors
// name a missing input, a broken symbolic link (given or in a directory), a directory with
// no regular file (saying when it holds only subdirectories).
absl::StatusOr<std::vector<std::string>> ExpandInputs(const std::vector<std::string>& inputs,
                                                      std::vector<std::string>* notices = nullptr);

// One piece of prepare's input: a whole file, or, for an uncompressed JSONL file larger
// than PrepareOptions::split_bytes, bytes [begin, end) of it, cut just after a newline, so
// that several threads read one large file.
struct InputUnit {
  size_t file = 0;              // index into the expanded inputs
  int64_t begin = 0, end = -1;  // end < 0: the whole file
  int64_t first_line = 1;       // the line number `begin` starts, for errors
  int64_t file_bytes = -1;      // bytes on disk (-1: unknown, a pipe)
  bool split = false;           // one of several units of its file
  bool last_of_file = true;
};

// `files` (expanded inputs) as units: each file whole, except uncompressed JSONL files
// larger than `split_bytes` (> 0), cut into pieces of about split_bytes after a newline
// (one pass over such a file counts its lines). Errors name an unreadable file.
absl::StatusOr<std::vector<InputUnit>> SplitInputs(const std::vector<std::string>& files, const ReadOptions& options,
                                                   int64_t split_bytes);

// Reads the documents of bytes [begin, end) of an uncompressed JSONL file, whose byte
// `begin` starts line `first_line` (errors and --strict_utf8 name file lines and bytes as
// when the whole file is read). A range without documents is not an error here.
absl::StatusOr<ReadStats> ReadJsonlRange(const std::string& path, int64_t begin, int64_t end, int64_t first_line,
                                         const ReadOptions& options, const DocumentFn& on_document);

struct PrepareProgress {
  int64_t bytes = 0;      // input bytes (decompressed) tokenized so far
  int64_t tokens = 0;     // tokens written so far, EOS included
  int64_t documents = 0;
  double seconds = 0;
  int64_t input_bytes_done = 0;    // bytes of the input files (on disk) done, about
  int64_t input_bytes_total = -1;  // all of them; -1: unknown (a pipe among the inputs)
};

struct PrepareOptions {
  std::vector<std::string> inputs;  // files or directories, in order
  std::string output_dir;           // created if missing
  ReadOptions read;
  int64_t shard_tokens = 100'000'000;  // tokens per train shard (llm.c's size); <= 2^31 - 1
  int64_t val_tokens = 131'072;        // held-out tokens (whole documents); 0: no val shard
  int threads = 0;                     // tokenizer threads (and at most as many readers); 0: all cores
  int64_t split_bytes = 32 << 20;      // uncompressed JSONL files larger than this are read in pieces
  // Called from the writing thread about 5 times a second, and once at the end.
  std::function<void(const PrepareProgress&)> on_progress;
  // Polled by the writing thread between chunks; true stops the run (Cancelled), removing
  // every *.tmp shard: an interrupted prepare leaves no shard behind.
  std::function<bool()> cancelled;
  // Called with a one-line notice (the stale *.tmp shards removed at the start). Null: none.
  std::function<void(const std::string&)> on_notice;
};

struct PrepareSummary {
  int64_t documents = 0;
  int64_t tokens = 0;          // all tokens written, EOS included
  int64_t val_documents = 0;
  int64_t val_tokens = 0;
  int64_t train_tokens = 0;
  int64_t bytes = 0;           // input bytes (decompressed)
  double seconds = 0;
  std::vector<std::string> train_shards;  // paths, in order
  std::string val_shard;                  // "" when val_tokens == 0
  int64_t replacements = 0;               // U+FFFD put in (ReadStats), all files
  std::vector<std::pair<std::string, int64_t>> replaced_files;  // (path, replacements) where > 0, in input order
};

// Tokenizes `options.inputs` with `tokenizer` into shards under `options.output_dir`.
// Needs a tokenizer with an EOS token. Before any work it refuses an output directory
// that is an input directory or lies inside one, and an input file inside the output
// directory (a re-run would read its own shards as text); it then removes the
// temporary shards (train_NNNNNN.bin.tmp, val_NNNNNN.bin.tmp, nothing else) that a
// killed prepare left there, saying so through `on_notice`. Complete shards of an earlier
// prepare there are all replaced once the run has finished (a failed run leaves them), and
// `on_notice` then says how many (one line). Besides the input errors
// above: no training documents left after the validation split, an unwritable output
// directory.
absl::StatusOr<PrepareSummary> Prepare(const Gpt2Tokenizer& tokenizer, const PrepareOptions& options);

}  // namespace multiscreen
