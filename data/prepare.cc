#include "data/prepare.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <thread>

#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_lock.h"
#include "common/input_file.h"
#include "common/status.h"
#include "data/byte_source.h"
#include "data/loader.h"
#include "data/megatron_index.h"
#include "data/token_file.h"
#include "data/utf8.h"
#include "nlohmann/json.hpp"

namespace multiscreen {
namespace {

namespace fs = std::filesystem;

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Between two reads of one document: stops on an interrupt, or when the document being
// read (`held` bytes from line `line` on) has passed options.max_document_bytes.
absl::Status CheckDocumentRead(const ReadOptions& options, const std::string& path, int64_t line, size_t held) {
  if (options.cancelled && options.cancelled()) {
    return absl::CancelledError(absl::StrCat(path, ": interrupted while reading"));
  }
  if (static_cast<int64_t>(held) > options.max_document_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ":", line, ": a document longer than ", options.max_document_bytes,
        " bytes (--max_document_bytes; no newline in it?): a plain-text file is one document, so split it or "
        "write JSONL, one document per line"));
  }
  return absl::OkStatus();
}

// The whole decompressed content of `source` (one document, or a JSON array of them).
absl::StatusOr<std::string> ReadAll(ByteSource& source, const std::string& path, const ReadOptions& options) {
  std::string out;
  std::vector<char> buf(1 << 20);
  while (true) {
    MS_RETURN_IF_ERROR(CheckDocumentRead(options, path, 1, out.size()));
    MS_ASSIGN_OR_RETURN(const size_t n, source.Read(buf.data(), buf.size()));
    if (n == 0) break;
    out.append(buf.data(), n);
  }
  MS_RETURN_IF_ERROR(CheckDocumentRead(options, path, 1, out.size()));
  return out;
}

// ---------------------------------------------------------------------------
// Files that are not text: token files (llm.c shards, Megatron pairs, headerless ids),
// other binary files, compressed data under a plain name. Tokenized as text they become
// one document of U+FFFD (a 3.76M-token shard did, and prepare exited 0).

constexpr char kNotText[] =
    ", not text: prepare tokenizes UTF-8 text, JSONL and JSON (token files are read as they are by train --data and "
    "eval ppl --data)";

// The error for a NUL byte at `byte` (of the decompressed file) of `where` ("FILE" or
// "FILE:LINE", then " file byte" for a line).
absl::Status NulByteError(const std::string& where, bool line, int64_t byte) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": a NUL byte at ", line ? "file byte " : "byte ", byte,
                                                 ": a binary file (token ids without a header? an archive?)", kNotText));
}

// What the first bytes of `path` (decompressed) say it is when it is not text, as an
// error naming it; OK for what may be text. `compressed`: the name ends in .gz or .zst.
absl::Status CheckHeadIsText(const std::string& path, std::string_view head, bool compressed) {
  int32_t magic = 0;
  if (head.size() >= 4) std::memcpy(&magic, head.data(), 4);
  if (magic == kTokenFileMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": an llm.c token shard (header magic ", kTokenFileMagic, ")", kNotText));
  }
  if (head.substr(0, kMegatronIndexMagicBytes) == std::string_view(kMegatronIndexMagic, kMegatronIndexMagicBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": a Megatron-LM index (magic MMIDIDX)", kNotText));
  }
  // (A regular file is refused so by OpenByteSource already; a pipe's head is seen here.)
  if (!compressed) MS_RETURN_IF_ERROR(CheckCompressedName(path, head));
  if (const size_t nul = head.find('\0'); nul != std::string_view::npos) {
    return NulByteError(path, /*line=*/false, static_cast<int64_t>(nul));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Readers.

InputFormat FormatOf(const std::string& path, InputFormat requested) {
  if (requested != InputFormat::kAuto) return requested;
  const std::string name = WithoutCompressionSuffix(path);
  if (absl::EndsWithIgnoreCase(name, ".jsonl") || absl::EndsWithIgnoreCase(name, ".ndjson")) return InputFormat::kJsonl;
  if (absl::EndsWithIgnoreCase(name, ".json")) return InputFormat::kJsonArray;
  return InputFormat::kText;
}

bool IsBlank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; });
}

std::string JsonError(const nlohmann::json::exception& e) {
  // "[json.exception.parse_error.101] parse error at line 1, column 5: ..." -> from "parse error".
  std::string m = e.what();
  if (const size_t p = m.find("] "); p != std::string::npos) m = m.substr(p + 2);
  return m;
}

// The text of one JSON value: a string, or an object's `field` holding a string.
absl::StatusOr<std::string> TextOf(nlohmann::json& value, const std::string& field, const std::string& where,
                                   bool allow_string) {
  if (allow_string && value.is_string()) return std::move(value.get_ref<std::string&>());
  if (!value.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": expected a JSON object", allow_string ? " or string" : "",
                                                   ", got ", value.type_name()));
  }
  auto it = value.find(field);
  if (it == value.end()) return absl::InvalidArgumentError(absl::StrCat(where, ": no field '", field, "'"));
  if (!it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": field '", field, "' is a ", it->type_name(), ", not a string"));
  }
  return std::move(it->get_ref<std::string&>());
}

// Where a piece of a file starts, for errors: its byte offset in the (decompressed) file
// and its line.
struct Place {
  const std::string& path;
  int64_t byte = 0;
  int64_t line = 1;
};

// Makes `text` (which starts at `at`) valid UTF-8 and, when `json`, free of lone surrogate
// escapes: replaces what is not by U+FFFD (data/utf8.h) and adds the count to `*replaced`,
// or under options.strict_utf8 returns an error naming the line and the file byte.
absl::Status MakeValid(std::string* text, bool json, const Place& at, const ReadOptions& options,
                       int64_t* replaced) {
  auto refuse = [&](int64_t bad, const std::string& what) {
    const int64_t line = at.line + std::count(text->begin(), text->begin() + bad, '\n');
    return absl::InvalidArgumentError(
        absl::StrCat(at.path, ":", line, ": ", what, " at file byte ", at.byte + bad, " (--strict_utf8)"));
  };
  const int64_t bad_utf8 = FindInvalidUtf8(*text);
  const int64_t bad_escape = json ? FindLoneSurrogateEscape(*text) : -1;
  if (options.strict_utf8) {  // the first problem in the file
    if (bad_utf8 >= 0 && (bad_escape < 0 || bad_utf8 < bad_escape)) return refuse(bad_utf8, "invalid UTF-8");
    if (bad_escape >= 0) return refuse(bad_escape, absl::StrCat("lone surrogate escape ", text->substr(bad_escape, 6)));
    return absl::OkStatus();
  }
  if (bad_utf8 >= 0) *replaced += ReplaceInvalidUtf8(text);
  if (bad_escape >= 0) *replaced += ReplaceLoneSurrogateEscapes(text);  // U+FFFD bytes hold no backslash
  return absl::OkStatus();
}

absl::Status JsonlLine(std::string_view line, const Place& at, const ReadOptions& options,
                       const DocumentFn& on_document, ReadStats* stats) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (IsBlank(line)) return absl::OkStatus();
  const std::string where = absl::StrCat(at.path, ":", at.line);
  if (const size_t nul = line.find('\0'); nul != std::string_view::npos) {
    return NulByteError(where, /*line=*/true, at.byte + static_cast<int64_t>(nul));
  }
  std::string repaired;
  if (FindInvalidUtf8(line) >= 0 || FindLoneSurrogateEscape(line) >= 0) {
    repaired.assign(line);
    MS_RETURN_IF_ERROR(MakeValid(&repaired, /*json=*/true, at, options, &stats->replacements));
    line = repaired;
  }
  nlohmann::json value;
  try {
    value = nlohmann::json::parse(line.begin(), line.end());
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": not valid JSON (", JsonError(e), ")"));
  }
  MS_ASSIGN_OR_RETURN(std::string text, TextOf(value, options.text_field, where, /*allow_string=*/false));
  ++stats->documents;
  return on_document(std::move(text), where);
}

// Reads JSONL from `source`, whose first byte is byte `first_byte` of the file and starts
// line `first_line`.
absl::Status ReadJsonl(ByteSource& source, const std::string& path, const ReadOptions& options,
                       const DocumentFn& on_document, ReadStats* stats, int64_t first_byte = 0,
                       int64_t first_line = 1) {
  std::string pending;
  int64_t pending_byte = first_byte;  // file offset of pending[0]
  std::vector<char> buf(1 << 20);
  int64_t line_no = first_line - 1;
  while (true) {
    MS_ASSIGN_OR_RETURN(const size_t n, source.Read(buf.data(), buf.size()));
    if (n == 0) break;
    pending.append(buf.data(), n);
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      const Place at{path, pending_byte + static_cast<int64_t>(start), ++line_no};
      MS_RETURN_IF_ERROR(CheckDocumentRead(options, path, line_no, nl - start));
      MS_RETURN_IF_ERROR(
          JsonlLine(std::string_view(pending).substr(start, nl - start), at, options, on_document, stats));
    }
    pending.erase(0, start);
    pending_byte += static_cast<int64_t>(start);
    MS_RETURN_IF_ERROR(CheckDocumentRead(options, path, line_no + 1, pending.size()));
  }
  return JsonlLine(pending, Place{path, pending_byte, ++line_no}, options, on_document, stats);
}

}  // namespace

absl::StatusOr<InputFormat> ParseInputFormat(const std::string& name) {
  if (name == "auto") return InputFormat::kAuto;
  if (name == "text") return InputFormat::kText;
  if (name == "jsonl") return InputFormat::kJsonl;
  if (name == "json") return InputFormat::kJsonArray;
  return absl::InvalidArgumentError(absl::StrCat("input format '", name, "' (expected auto, text, jsonl or json)"));
}

absl::StatusOr<ReadStats> ReadDocuments(const std::string& path, const ReadOptions& options,
                                        const DocumentFn& on_document) {
  MS_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> source, OpenByteSource(path, options.cancelled));
  const InputFormat format = FormatOf(path, options.format);
  ReadStats stats;
  if (format == InputFormat::kJsonl) {
    MS_RETURN_IF_ERROR(ReadJsonl(*source, path, options, on_document, &stats));
  } else {
    MS_ASSIGN_OR_RETURN(std::string content, ReadAll(*source, path, options));
    MS_RETURN_IF_ERROR(CheckHeadIsText(path, content, IsCompressedName(path)));
    if (format == InputFormat::kText) {
      if (content.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": empty input"));
      MS_RETURN_IF_ERROR(MakeValid(&content, /*json=*/false, Place{path}, options, &stats.replacements));
      stats.documents = 1;
      MS_RETURN_IF_ERROR(on_document(std::move(content), path));
      return stats;
    }
    // JSON: an array of documents, or JSONL under a .json name.
    const size_t first = content.find_first_not_of(" \t\r\n");
    if (first != std::string::npos && content[first] == '{') {
      struct StringSource : ByteSource {
        std::string data;
        size_t pos = 0;
        absl::StatusOr<size_t> Read(char* buf, size_t cap) override {
          const size_t n = std::min(cap, data.size() - pos);
          std::copy_n(data.data() + pos, n, buf);
          pos += n;
          return n;
        }
      } lines;
      lines.data = std::move(content);
      MS_RETURN_IF_ERROR(ReadJsonl(lines, path, options, on_document, &stats));
    } else if (first != std::string::npos) {
      MS_RETURN_IF_ERROR(MakeValid(&content, /*json=*/true, Place{path}, options, &stats.replacements));
      nlohmann::json array;
      try {
        array = nlohmann::json::parse(content);
      } catch (const nlohmann::json::exception& e) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON (", JsonError(e), ")"));
      }
      content.clear();
      content.shrink_to_fit();
      if (!array.is_array()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": expected a JSON array of documents, got ",
                                                       array.type_name()));
      }
      for (size_t i = 0; i < array.size(); ++i) {
        const std::string where = absl::StrCat(path, "[", i, "]");
        MS_ASSIGN_OR_RETURN(std::string text, TextOf(array[i], options.text_field, where, /*allow_string=*/true));
        ++stats.documents;
        MS_RETURN_IF_ERROR(on_document(std::move(text), where));
      }
    }
  }
  if (stats.documents == 0) return absl::InvalidArgumentError(absl::StrCat(path, ": empty input (no documents)"));
  return stats;
}

namespace {

// Bytes [begin, end) of an uncompressed file.
class RangeSource : public ByteSource {
 public:
  RangeSource(std::string path, std::FILE* f, int64_t end) : path_(std::move(path)), f_(f), left_(end) {}
  ~RangeSource() override { std::fclose(f_); }
  absl::StatusOr<size_t> Read(char* buf, size_t cap) override {
    const size_t want = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(cap), left_));
    if (want == 0) return size_t{0};
    const size_t n = std::fread(buf, 1, want, f_);
    if (n == 0) return absl::DataLossError(absl::StrCat(path_, ": read failed (the file shrank?)"));
    left_ -= static_cast<int64_t>(n);
    return n;
  }

 private:
  std::string path_;
  std::FILE* f_;
  int64_t left_;
};

}  // namespace

absl::StatusOr<ReadStats> ReadJsonlRange(const std::string& path, int64_t begin, int64_t end, int64_t first_line,
                                         const ReadOptions& options, const DocumentFn& on_document) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  if (std::fseek(f, static_cast<long>(begin), SEEK_SET) != 0) {
    std::fclose(f);
    return absl::DataLossError(absl::StrCat(path, ": cannot seek to byte ", begin));
  }
  RangeSource source(path, f, end - begin);
  ReadStats stats;
  MS_RETURN_IF_ERROR(ReadJsonl(source, path, options, on_document, &stats, begin, first_line));
  return stats;
}

absl::StatusOr<std::vector<InputUnit>> SplitInputs(const std::vector<std::string>& files, const ReadOptions& options,
                                                   int64_t split_bytes) {
  std::vector<InputUnit> units;
  std::vector<char> buf(1 << 20);
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string& path = files[i];
    InputUnit whole;
    whole.file = i;
    std::error_code ec;
    const bool regular = fs::is_regular_file(path, ec);
    const int64_t size = regular ? static_cast<int64_t>(fs::file_size(path, ec)) : -1;
    whole.file_bytes = ec ? -1 : size;
    const bool compressed = IsCompressedName(path);
    if (!regular || ec || compressed || FormatOf(path, options.format) != InputFormat::kJsonl || split_bytes <= 0 ||
        size <= split_bytes) {
      units.push_back(whole);
      continue;
    }
    // Cut after the first newline at or past every split_bytes, counting lines on the way.
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
    int64_t offset = 0, lines = 0, begin = 0, begin_line = 1;
    auto cut = [&](int64_t end) {
      InputUnit u;
      u.file = i;
      u.begin = begin;
      u.end = end;
      u.first_line = begin_line;
      u.file_bytes = end - begin;
      u.last_of_file = false;
      units.push_back(u);
      begin = end;
      begin_line = lines + 1;
    };
    while (true) {
      const size_t n = std::fread(buf.data(), 1, buf.size(), f);
      if (n == 0) break;
      for (size_t k = 0; k < n; ++k) {
        if (buf[k] != '\n') continue;
        ++lines;
        if (offset + static_cast<int64_t>(k) + 1 - begin >= split_bytes) cut(offset + static_cast<int64_t>(k) + 1);
      }
      offset += static_cast<int64_t>(n);
    }
    const bool failed = std::ferror(f) != 0;
    std::fclose(f);
    if (failed) return absl::DataLossError(absl::StrCat(path, ": read failed"));
    if (offset > begin || begin == 0) cut(offset);
    units.back().last_of_file = true;
    for (size_t k = units.size(); k-- > 0 && units[k].file == i;) units[k].split = true;
  }
  return units;
}

namespace {

// "a/, b/, c/" (the first five names, then how many more).
std::string NameList(const std::vector<std::string>& names, const char* suffix = "") {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 5; ++i) absl::StrAppend(&out, i ? ", " : "", names[i], suffix);
  if (names.size() > 5) absl::StrAppend(&out, " and ", names.size() - 5, " more");
  return out;
}

// `path` is a symbolic link whose target is missing: the error naming both.
absl::Status BrokenLinkError(const std::string& path) {
  std::error_code ec;
  return absl::NotFoundError(absl::StrCat(path, ": a broken symbolic link (to ", fs::read_symlink(path, ec).string(),
                                          "): the file it names is missing"));
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandInputs(const std::vector<std::string>& inputs,
                                                      std::vector<std::string>* notices) {
  // Each file with the input that named it ("" when named itself), for the duplicates' notice.
  std::vector<std::pair<std::string, std::string>> named;
  for (const std::string& input : inputs) {
    std::error_code ec;
    if (fs::is_directory(input, ec)) {
      std::vector<std::string> found, subdirectories, others;
      for (const auto& entry : fs::directory_iterator(input, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.empty() || name[0] == '.') continue;
        std::error_code file_ec;
        if (entry.is_regular_file(file_ec)) {
          found.push_back(entry.path().string());
        } else if (entry.is_directory(file_ec)) {
          subdirectories.push_back(name);
        } else if (entry.is_symlink(file_ec) && !fs::exists(entry.path(), file_ec)) {
          return BrokenLinkError(entry.path().string());
        } else {
          others.push_back(name);
        }
      }
      if (ec) return absl::NotFoundError(absl::StrCat(input, ": cannot list directory (", ec.message(), ")"));
      std::sort(subdirectories.begin(), subdirectories.end());
      std::sort(others.begin(), others.end());
      const size_t n_dirs = subdirectories.size(), n_others = others.size();
      if (found.empty() && n_dirs > 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            input, ": no files directly in it, only ", n_dirs, n_dirs == 1 ? " subdirectory (" : " subdirectories (",
            NameList(subdirectories, "/"), "): prepare does not recurse; give each as an input of its own (--input=",
            (fs::path(input) / subdirectories[0]).string(), ",...)"));
      }
      if (found.empty()) return absl::InvalidArgumentError(absl::StrCat(input, ": empty input (no files)"));
      if ((n_dirs > 0 || n_others > 0) && notices != nullptr) {
        std::vector<std::string> parts;
        if (n_dirs > 0) {
          parts.push_back(absl::StrCat(n_dirs, n_dirs == 1 ? " subdirectory (" : " subdirectories (",
                                       NameList(subdirectories, "/"),
                                       "; not read: prepare does not recurse, so give one as an --input of its own)"));
        }
        if (n_others > 0) {
          parts.push_back(absl::StrCat(n_others, n_others == 1 ? " entry that is" : " entries that are",
                                       " not a regular file (", NameList(others), ")"));
        }
        notices->push_back(absl::StrCat("--input=", input, ": skipped ", absl::StrJoin(parts, " and ")));
      }
      std::sort(found.begin(), found.end());
      for (std::string& f : found) named.emplace_back(std::move(f), input);
    } else if (fs::exists(input, ec)) {
      named.emplace_back(input, "");
    } else if (fs::is_symlink(fs::symlink_status(input, ec))) {
      return BrokenLinkError(input);
    } else {
      return absl::NotFoundError(absl::StrCat(input, ": no such input file or directory"));
    }
  }
  if (named.empty()) return absl::InvalidArgumentError("no input files (--input)");
  // A file named twice (itself and through its directory, two spellings, a link) is read
  // once, at its first place: read twice, its documents would be in the validation shard
  // and in training both. Files are told apart by device and inode.
  std::vector<std::string> files;
  std::map<std::pair<dev_t, ino_t>, std::string> seen;
  for (auto& [file, from] : named) {
    struct stat st {};
    if (::stat(file.c_str(), &st) == 0) {
      const auto [it, inserted] = seen.emplace(std::pair{st.st_dev, st.st_ino}, file);
      if (!inserted) {
        if (notices != nullptr) {
          notices->push_back(absl::StrCat("--input: ", file, from.empty() ? "" : absl::StrCat(" (in ", from, ")"), " is ",
                                          it->second, " again: read once, at its first place"));
        }
        continue;
      }
    }
    files.push_back(std::move(file));
  }
  return files;
}

// ---------------------------------------------------------------------------
// Prepare: reader threads over the input units, `threads` tokenizer threads, this thread
// writing in input order.
//
// Each unit (a file, or a range of a large JSONL file) is read by one reader thread into
// chunks of documents keyed (unit, chunk); tokenizer threads take the lowest key waiting;
// the writer takes results in key order, so the output does not depend on which thread
// did what. Readers claim units in order and stop when `max_inflight` chunks wait for
// the writer, except the reader of the unit the writer is at (so it never waits on a
// reader that waits on it).

namespace {

struct Doc {
  std::string text;
  std::string where;
};

using Key = std::pair<int64_t, int64_t>;  // (unit, chunk)

struct Chunk {
  std::vector<Doc> docs;
  int64_t bytes = 0;
  bool unit_end = false;  // the unit's last chunk (possibly empty)
  ReadStats stats;        // with unit_end: the unit's
  absl::Status status;    // a read error after these documents
};

struct Encoded {
  std::vector<int32_t> tokens;
  std::vector<int64_t> doc_ends;  // end offset in `tokens` of each document (after its EOS)
  int64_t bytes = 0;
  int64_t unit = 0;
  bool unit_end = false;
  ReadStats stats;
  absl::Status status;
};

class Pipeline {
 public:
  Pipeline(const Gpt2Tokenizer& tokenizer, const std::vector<std::string>& files, std::vector<InputUnit> units,
           const ReadOptions& read, int threads, int readers)
      : tokenizer_(tokenizer), files_(files), units_(std::move(units)), read_(read),
        max_inflight_(4 * (threads + readers)) {
    for (int i = 0; i < readers; ++i) readers_.emplace_back([this] { Read(); });
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Work(); });
  }
  ~Pipeline() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& r : readers_) r.join();
    for (auto& w : workers_) w.join();
  }

  // The next chunk's tokens in input order; false at the end of the input.
  bool Next(Encoded* out) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return next_.first == static_cast<int64_t>(units_.size()) || results_.count(next_) > 0; });
    auto it = results_.find(next_);
    if (it == results_.end()) return false;
    *out = std::move(it->second);
    results_.erase(it);
    --inflight_;
    next_ = out->unit_end ? Key{next_.first + 1, 0} : Key{next_.first, next_.second + 1};
    cv_.notify_all();
    return true;
  }

 private:
  // Queues a chunk for the tokenizers; false when stopping.
  bool Submit(Key key, Chunk chunk) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return stop_ || inflight_ < max_inflight_ || key.first == next_.first; });
    if (stop_) return false;
    ++inflight_;
    work_.emplace(key, std::move(chunk));
    cv_.notify_all();
    return true;
  }

  // What escapes a thread as an exception (std::bad_alloc for a document larger than
  // memory) would call std::terminate: it becomes the status of the chunk instead.
  static absl::Status Thrown(const std::string& where, const char* what) {
    return absl::ResourceExhaustedError(absl::StrCat(where, ": ", what));
  }

  void Read() {
    while (true) {
      int64_t u;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_ || next_unit_ == static_cast<int64_t>(units_.size())) return;
        u = next_unit_++;
      }
      const InputUnit& unit = units_[u];
      const std::string& file = files_[unit.file];
      Chunk chunk;
      int64_t c = 0;
      bool stopped = false;
      auto on_document = [&](std::string text, const std::string& where) -> absl::Status {
        chunk.bytes += static_cast<int64_t>(text.size());
        chunk.docs.push_back({std::move(text), where});
        if (chunk.bytes >= (1 << 20) || chunk.docs.size() >= 8192) {
          if (!Submit({u, c++}, std::move(chunk))) {
            stopped = true;
            return absl::CancelledError("stopped");
          }
          chunk = Chunk();
        }
        return absl::OkStatus();
      };
      absl::StatusOr<ReadStats> stats = absl::UnknownError("");
      try {
        stats = unit.end < 0 ? ReadDocuments(file, read_, on_document)
                             : ReadJsonlRange(file, unit.begin, unit.end, unit.first_line, read_, on_document);
      } catch (const std::bad_alloc&) {
        stats = Thrown(file, "out of memory reading it (a document too large?)");
      } catch (const std::exception& e) {
        stats = Thrown(file, e.what());
      }
      if (stopped) return;
      chunk.unit_end = true;
      chunk.status = stats.status();
      if (stats.ok()) chunk.stats = *stats;
      if (!Submit({u, c}, std::move(chunk))) return;
    }
  }

  void Work() {
    while (true) {
      std::pair<Key, Chunk> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !work_.empty(); });
        if (stop_ || work_.empty()) return;
        job = std::move(*work_.begin());
        work_.erase(work_.begin());
      }
      Encoded enc;
      const Chunk& chunk = job.second;
      enc.bytes = chunk.bytes;
      enc.unit = job.first.first;
      enc.unit_end = chunk.unit_end;
      enc.stats = chunk.stats;
      for (const Doc& doc : chunk.docs) {
        absl::Status s;
        try {
          s = tokenizer_.Encode(doc.text, &enc.tokens);
          enc.tokens.push_back(tokenizer_.eos_id());
          enc.doc_ends.push_back(static_cast<int64_t>(enc.tokens.size()));
        } catch (const std::bad_alloc&) {
          s = Thrown(doc.where, "out of memory encoding it");
        } catch (const std::exception& e) {
          s = Thrown(doc.where, e.what());
        }
        if (!s.ok()) {
          enc.status = s.message().rfind(doc.where, 0) == 0
                           ? s
                           : absl::Status(s.code(), absl::StrCat(doc.where, ": ", s.message()));
          break;
        }
      }
      if (enc.status.ok()) enc.status = chunk.status;
      std::lock_guard<std::mutex> lock(mu_);
      results_[job.first] = std::move(enc);
      cv_.notify_all();
    }
  }

  const Gpt2Tokenizer& tokenizer_;
  const std::vector<std::string>& files_;
  const std::vector<InputUnit> units_;
  const ReadOptions read_;
  const int64_t max_inflight_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<Key, Chunk> work_;
  std::map<Key, Encoded> results_;
  int64_t next_unit_ = 0;  // the next unit a reader claims
  Key next_ = {0, 0};      // the chunk the writer takes next
  int64_t inflight_ = 0;   // chunks submitted and not yet taken by the writer
  bool stop_ = false;
  std::vector<std::thread> readers_;
  std::vector<std::thread> workers_;
};

std::string ShardName(const char* split, int64_t index) {
  char name[64];
  std::snprintf(name, sizeof(name), "%s_%06lld.bin", split, static_cast<long long>(index));
  return name;
}

// Index of "<split>_NNNNNN.bin", or -1 for any other name.
int64_t ShardIndex(const std::string& name, const std::string& split) {
  const std::string prefix = split + "_";
  if (name.size() != prefix.size() + 6 + 4 || name.compare(0, prefix.size(), prefix) != 0 || !EndsWith(name, ".bin")) {
    return -1;
  }
  int64_t index = 0;
  for (size_t i = prefix.size(); i < prefix.size() + 6; ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    index = index * 10 + (name[i] - '0');
  }
  return index;
}

// Refuses a regular input file that is not text by its first 64 KiB (decompressed): a
// token file or another binary file (CheckHeadIsText), or the data half of a Megatron
// pair (headerless, known by the .idx beside it). Pipes, FIFOs and devices are not looked
// at first (that would consume them): their NUL bytes are met as they are read.
absl::Status CheckLooksLikeText(const std::string& path, const ReadOptions& options) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return absl::OkStatus();
  std::string bin, idx;
  if (EndsWith(path, ".bin") && FindMegatronPair(path, &bin, &idx)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": a Megatron-LM token file (", idx, " beside it)", kNotText));
  }
  MS_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> source, OpenByteSource(path, options.cancelled));
  std::string head(64 << 10, '\0');
  size_t got = 0;
  while (got < head.size()) {
    MS_ASSIGN_OR_RETURN(const size_t n, source->Read(head.data() + got, head.size() - got));
    if (n == 0) break;
    got += n;
  }
  head.resize(got);
  return CheckHeadIsText(path, head, IsCompressedName(path));
}

// Whether `path` is `dir` or lies under it (both absolute and normal).
bool Within(const fs::path& path, const fs::path& dir) {
  const fs::path rel = path.lexically_relative(dir);
  return !rel.empty() && *rel.begin() != "..";
}

// `path` made absolute with its links resolved as far as it exists.
fs::path Resolved(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) p = fs::absolute(path, ec).lexically_normal();
  return p;
}

// Refuses an output directory that is an input directory or lies inside one, and a
// regular input file inside the output directory: a re-run would read its own shards
// back as text (pipes and devices are not files of a directory and pass).
absl::Status CheckOutputApartFromInputs(const std::vector<std::string>& inputs, const std::vector<std::string>& files,
                                        const std::string& output_dir) {
  const fs::path out = Resolved(output_dir);
  std::error_code ec;
  for (const std::string& input : inputs) {
    if (!fs::is_directory(input, ec)) continue;
    const fs::path in = Resolved(input);
    if (Within(out, in)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--output=", output_dir, out == in ? " is the input directory " : " is inside the input directory ", input,
          ": prepare would read its own shards back as text; choose an output directory outside the inputs"));
    }
  }
  for (const std::string& file : files) {
    if (!fs::is_regular_file(file, ec)) continue;
    if (Within(Resolved(file), out)) {
      return absl::InvalidArgumentError(absl::StrCat("--input: ", file, " is inside --output=", output_dir,
                                                     ": prepare would read shards it writes there; move the input "
                                                     "or choose another output directory"));
    }
  }
  return absl::OkStatus();
}

// Removes the temporary shards ("train_NNNNNN.bin.tmp", "val_NNNNNN.bin.tmp") that a
// prepare killed outright (SIGKILL, a second SIGINT) left in `dir`, and only those;
// returns their names, sorted.
std::vector<std::string> RemoveStaleTemporaryShards(const fs::path& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!EndsWith(name, ".tmp")) continue;
    const std::string shard = name.substr(0, name.size() - 4);
    if (ShardIndex(shard, "train") < 0 && ShardIndex(shard, "val") < 0) continue;
    std::error_code file_ec;
    if (entry.is_regular_file(file_ec) && fs::remove(entry.path(), file_ec)) removed.push_back(name);
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

// The complete shards ("train_NNNNNN.bin", "val_NNNNNN.bin") in `dir`: {train, val}.
std::pair<int64_t, int64_t> CountShards(const fs::path& dir) {
  std::pair<int64_t, int64_t> count{0, 0};
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    count.first += ShardIndex(name, "train") >= 0;
    count.second += ShardIndex(name, "val") >= 0;
  }
  return count;
}

}  // namespace

absl::StatusOr<PrepareSummary> Prepare(const Gpt2Tokenizer& tokenizer, const PrepareOptions& options) {
  if (tokenizer.eos_id() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(tokenizer.source(), ": vocabulary has no <|endoftext|> token"));
  }
  if (options.shard_tokens < 1 || options.shard_tokens > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shard_tokens=", options.shard_tokens, " (expected 1 to 2147483647)"));
  }
  if (options.val_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--val_tokens=", options.val_tokens, " (expected >= 0)"));
  }
  if (options.output_dir.empty()) return absl::InvalidArgumentError("--output=DIR is required");
  std::vector<std::string> notices;
  MS_ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandInputs(options.inputs, &notices));
  MS_RETURN_IF_ERROR(CheckOutputApartFromInputs(options.inputs, files, options.output_dir));
  for (const std::string& file : files) MS_RETURN_IF_ERROR(CheckLooksLikeText(file, options.read));
  if (options.on_notice) {
    for (const std::string& line : notices) options.on_notice(line);
  }
  MS_RETURN_IF_ERROR(CreateOutputDirectory("--output", options.output_dir));
  std::error_code ec;
  // One prepare per output directory: a second would remove the first one's temporaries
  // (below) and interleave its shards.
  auto lock = FileLock::Acquire((fs::path(options.output_dir) / ".prepare.lock").string(), "prepare",
                               FileLock::OnRelease::kRemoveFile);
  if (!lock.ok()) {
    return absl::Status(lock.status().code(), absl::StrCat("--output=", options.output_dir, ": ", lock.status().message()));
  }
  if (!lock->supported() && options.on_notice) {
    options.on_notice(absl::StrCat("--output=", options.output_dir,
                                   ": this file system has no flock, so a second prepare into it would not be stopped"));
  }
  if (const std::vector<std::string> stale = RemoveStaleTemporaryShards(options.output_dir); !stale.empty() && options.on_notice) {
    options.on_notice(absl::StrCat("removed ", stale.size(), " temporary shard", stale.size() == 1 ? "" : "s",
                                   " left in ", options.output_dir, " by an interrupted prepare: ", absl::StrJoin(stale, ", ")));
  }
  // Re-preparing into a directory replaces its shards, all of them (stale ones are dropped
  // below), only once this run has finished: said then (a failed run leaves them, and its
  // error stays one line).
  const std::pair<int64_t, int64_t> earlier = CountShards(options.output_dir);
  const int version = tokenizer.vocab_size() <= 65536 ? 1 : 2;
  const int threads =
      options.threads > 0 ? options.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const fs::path out_dir(options.output_dir);

  PrepareSummary summary;
  std::vector<std::unique_ptr<TokenFileWriter>> written;  // finished, still *.tmp
  std::unique_ptr<TokenFileWriter> val, train;
  auto cleanup = [&](absl::Status status) {
    val.reset();
    train.reset();
    for (const auto& w : written) fs::remove(w->path(), ec);
    for (int64_t i = 0; i <= static_cast<int64_t>(summary.train_shards.size()); ++i) {
      fs::remove(out_dir / (ShardName("train", i) + ".tmp"), ec);
    }
    fs::remove(out_dir / (ShardName("val", 0) + ".tmp"), ec);
    return status;
  };
  if (options.val_tokens > 0) {
    auto w = TokenFileWriter::Create((out_dir / (ShardName("val", 0) + ".tmp")).string(), version);
    if (!w.ok()) return cleanup(w.status());
    val = *std::move(w);
  }

  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  double last_report = 0;

  MS_ASSIGN_OR_RETURN(std::vector<InputUnit> units, SplitInputs(files, options.read, options.split_bytes));
  int64_t total_bytes = 0;  // on disk; -1: unknown (a pipe)
  for (const InputUnit& u : units) total_bytes = u.file_bytes < 0 || total_bytes < 0 ? -1 : total_bytes + u.file_bytes;
  int64_t done_bytes = 0, unit_text_bytes = 0;  // on disk, of the units done; text of the unit in progress
  int64_t last_val_document = 0;  // tokens of the last document the validation shard took
  auto report = [&] {
    if (!options.on_progress) return;
    PrepareProgress p{summary.bytes, summary.tokens, summary.documents, seconds()};
    p.input_bytes_total = total_bytes;
    p.input_bytes_done = done_bytes + unit_text_bytes;
    if (total_bytes >= 0) p.input_bytes_done = std::min(p.input_bytes_done, total_bytes);
    options.on_progress(p);
  };
  {
    const int readers = static_cast<int>(std::min<size_t>(units.size(), static_cast<size_t>(threads)));
    ReadOptions read = options.read;
    if (!read.cancelled) read.cancelled = options.cancelled;  // a reader waiting on a pipe stops too
    Pipeline pipeline(tokenizer, files, units, read, threads, readers);
    std::vector<ReadStats> file_stats(files.size());
    Encoded enc;
    while (pipeline.Next(&enc)) {
      if (options.cancelled && options.cancelled()) {
        return cleanup(absl::CancelledError(absl::StrCat("interrupted after ", summary.documents,
                                                         " documents; no shard written")));
      }
      if (!enc.status.ok()) return cleanup(enc.status);
      int64_t begin = 0;
      for (const int64_t end : enc.doc_ends) {
        const int32_t* ids = enc.tokens.data() + begin;
        const int64_t n = end - begin;
        begin = end;
        ++summary.documents;
        summary.tokens += n;
        if (val != nullptr && summary.val_tokens < options.val_tokens) {
          if (absl::Status s = val->Append(ids, n); !s.ok()) return cleanup(s);
          last_val_document = n;
          summary.val_tokens += n;
          ++summary.val_documents;
          continue;
        }
        for (int64_t done = 0; done < n;) {
          if (train == nullptr || train->count() == options.shard_tokens) {
            if (train != nullptr) {
              if (absl::Status s = train->Finish(); !s.ok()) return cleanup(s);
              written.push_back(std::move(train));
            }
            const std::string name = ShardName("train", static_cast<int64_t>(summary.train_shards.size()));
            auto w = TokenFileWriter::Create((out_dir / (name + ".tmp")).string(), version);
            if (!w.ok()) return cleanup(w.status());
            train = *std::move(w);
            summary.train_shards.push_back((out_dir / name).string());
          }
          const int64_t take = std::min(n - done, options.shard_tokens - train->count());
          if (absl::Status s = train->Append(ids + done, take); !s.ok()) return cleanup(s);
          done += take;
          summary.train_tokens += take;
        }
      }
      summary.bytes += enc.bytes;
      const InputUnit& unit = units[enc.unit];
      const std::string& file = files[unit.file];
      const bool compressed = IsCompressedName(file);
      if (!compressed) unit_text_bytes += enc.bytes;
      if (enc.unit_end) {
        done_bytes += std::max<int64_t>(0, unit.file_bytes);
        unit_text_bytes = 0;
        ReadStats& f = file_stats[unit.file];
        f.documents += enc.stats.documents;
        f.replacements += enc.stats.replacements;
        if (unit.last_of_file) {
          // A file read in pieces: no piece alone can tell that the whole has no document.
          if (unit.split && f.documents == 0) {
            return cleanup(absl::InvalidArgumentError(absl::StrCat(file, ": empty input (no documents)")));
          }
          if (f.replacements > 0) summary.replaced_files.emplace_back(file, f.replacements);
        }
      }
      if (seconds() - last_report >= 0.2) {
        last_report = seconds();
        report();
      }
    }
    for (const auto& [file, n] : summary.replaced_files) summary.replacements += n;
  }
  if (summary.train_tokens == 0) {
    // The validation shard takes whole documents until it holds --val_tokens: the last
    // document stays for training only when the ones before it reach --val_tokens.
    const int64_t before_last = summary.val_tokens - last_val_document;
    const std::string head = absl::StrCat("all ", summary.documents, " document", summary.documents == 1 ? "" : "s",
                                          " (", summary.tokens, " tokens) went to the validation shard (whole documents "
                                          "until it holds --val_tokens=", options.val_tokens, "); ");
    return cleanup(absl::InvalidArgumentError(
        before_last > 0
            ? absl::StrCat(head, "--val_tokens=", before_last, " or less leaves the last document for training, "
                           "--val_tokens=0 all of them; or add input")
            : absl::StrCat(head, "only --val_tokens=0 (no validation shard) leaves ",
                           summary.documents == 1 ? "the document" : "them", " for training; or add input")));
  }
  if (absl::Status s = train->Finish(); !s.ok()) return cleanup(s);
  written.push_back(std::move(train));
  if (val != nullptr) {
    if (absl::Status s = val->Finish(); !s.ok()) return cleanup(s);
    written.push_back(std::move(val));
    summary.val_shard = (out_dir / ShardName("val", 0)).string();
  }
  // All shards are complete: move them into place, then drop stale ones. The renames
  // are not one atomic step, so a marker covers them: a directory killed half-way holds
  // it, and the loader refuses such a mix of new and stale shards (ListShards).
  const fs::path marker = out_dir / kPrepareIncompleteMarker;
  {
    std::ofstream m(marker, std::ios::trunc);
    m << "prepare was moving new shards into place here and did not finish; run it again\n";
    m.close();
    if (!m) return cleanup(absl::DataLossError(absl::StrCat(marker.string(), ": cannot write")));
  }
  for (const auto& w : written) {
    const std::string& tmp = w->path();
    fs::rename(tmp, tmp.substr(0, tmp.size() - 4), ec);
    if (ec) return cleanup(absl::DataLossError(absl::StrCat(tmp, ": cannot rename into place (", ec.message(), ")")));
  }
  for (const auto& entry : fs::directory_iterator(out_dir, ec)) {
    const std::string name = entry.path().filename().string();
    const int64_t train_index = ShardIndex(name, "train");
    const int64_t val_index = ShardIndex(name, "val");
    if (train_index >= static_cast<int64_t>(summary.train_shards.size()) ||
        (val_index >= 0 && (summary.val_shard.empty() || val_index > 0))) {
      fs::remove(entry.path(), ec);
    }
  }
  fs::remove(marker, ec);
  if (ec) return absl::DataLossError(absl::StrCat(marker.string(), ": cannot remove (", ec.message(), ")"));
  if (const auto [train_shards, val_shards] = earlier; train_shards + val_shards > 0 && options.on_notice) {
    options.on_notice(absl::StrCat("replaced the ", train_shards + val_shards, " shard",
                                   train_shards + val_shards == 1 ? "" : "s", " of an earlier prepare in --output=",
                                   options.output_dir, " (", train_shards, " train, ", val_shards, " val)"));
  }
  summary.seconds = seconds();
  report();
  return summary;
}

}  // namespace multiscreen
