#include "data/gpt2_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <queue>

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"
#include "common/input_file.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace multiscreen {
namespace {

// Unicode White_Space (what \s means in the Python `regex` and Rust references).
#define MS_WS R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})"
// GPT-2's pattern, with \s and \S spelled as White_Space classes.
constexpr const char* kPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^)" MS_WS R"(\p{L}\p{N}]+|[)" MS_WS R"(]+(?![^)" MS_WS
    R"(])|[)" MS_WS R"(]+)";
#undef MS_WS

// Pieces longer than this (in bytes) merge with a heap instead of repeated scans.
constexpr size_t kLongPiece = 96;
// Per-thread piece cache: cleared when it reaches this many entries.
constexpr size_t kCacheEntries = 1 << 16;

std::atomic<uint64_t> next_instance_id{1};

// GPT-2's bytes_to_unicode(): byte -> code point of its printable stand-in.
std::vector<uint32_t> BytesToUnicode() {
  std::vector<uint32_t> cp(256, 0);
  std::vector<bool> direct(256, false);
  for (int b = '!'; b <= '~'; ++b) direct[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
  uint32_t n = 0;
  for (int b = 0; b < 256; ++b) cp[b] = direct[b] ? b : 256 + n++;
  return cp;
}

void AppendUtf8(uint32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// Decodes the stand-in characters of a vocabulary key back to bytes; false when a
// character is not one of the 256 stand-ins.
bool KeyToBytes(std::string_view key, const absl::flat_hash_map<uint32_t, uint8_t>& byte_of, std::string* out) {
  out->clear();
  size_t i = 0;
  while (i < key.size()) {
    const auto c0 = static_cast<uint8_t>(key[i]);
    uint32_t c;
    int len;
    if (c0 < 0x80) {
      c = c0, len = 1;
    } else if ((c0 & 0xE0) == 0xC0) {
      c = c0 & 0x1F, len = 2;
    } else if ((c0 & 0xF0) == 0xE0) {
      c = c0 & 0x0F, len = 3;
    } else {
      return false;
    }
    if (i + len > key.size()) return false;
    for (int k = 1; k < len; ++k) c = (c << 6) | (static_cast<uint8_t>(key[i + k]) & 0x3F);
    auto it = byte_of.find(c);
    if (it == byte_of.end()) return false;
    out->push_back(static_cast<char>(it->second));
    i += len;
  }
  return true;
}

inline uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

// Per-thread state: PCRE2 match data and JIT stack, and a cache piece -> ids.
struct Gpt2Tokenizer::Scratch {
  uint64_t owner = 0;
  pcre2_match_data* match = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  pcre2_match_context* context = nullptr;
  absl::flat_hash_map<std::string, std::vector<int32_t>> cache;
  std::vector<int32_t> word;

  Scratch() {
    match = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr);
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~Scratch() {
    pcre2_match_data_free(match);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
  }
};

Gpt2Tokenizer::~Gpt2Tokenizer() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

Gpt2Tokenizer::Scratch& Gpt2Tokenizer::ThreadScratch() const {
  // One slot per thread: a thread that switches tokenizers starts a fresh cache.
  thread_local std::unique_ptr<Scratch> scratch;
  if (!scratch) scratch = std::make_unique<Scratch>();
  if (scratch->owner != instance_id_) {
    scratch->cache.clear();
    scratch->owner = instance_id_;
  }
  return *scratch;
}

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Gpt2Tokenizer::Load(const std::string& dir) {
  namespace fs = std::filesystem;
  auto pick = [&](const char* a, const char* b) -> std::string {
    const fs::path pa = fs::path(dir) / a;
    std::error_code ec;
    if (fs::exists(pa, ec)) return pa.string();
    const fs::path pb = fs::path(dir) / b;
    if (fs::exists(pb, ec)) return pb.string();
    return "";
  };
  std::error_code ec;
  if (const fs::file_status st = fs::status(dir, ec); fs::exists(st) && !fs::is_directory(st)) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, fs::is_regular_file(st) ? ": is a file" : ": is not a directory",
        ", and a tokenizer is a directory holding vocab.json and merges.txt (e.g. data_cache/gpt2)"));
  }
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(
        absl::StrCat(dir, ": tokenizer directory not found (run scripts/setup, which fetches data_cache/gpt2)"));
  }
  const std::string vocab_path = pick("vocab.json", "encoder.json");
  const std::string merges_path = pick("merges.txt", "vocab.bpe");
  if (vocab_path.empty()) return absl::NotFoundError(absl::StrCat(dir, ": has no vocab.json or encoder.json"));
  if (merges_path.empty()) return absl::NotFoundError(absl::StrCat(dir, ": has no merges.txt or vocab.bpe"));
  // Regular files only (a FIFO would block, /dev/zero never end, a directory read as
  // empty), of a bounded size: GPT-2's are 1 MiB and 456 KiB.
  MS_ASSIGN_OR_RETURN(std::string vocab, ReadRegularFile(vocab_path, "tokenizer vocabulary", kMaxTokenizerFileBytes));
  MS_ASSIGN_OR_RETURN(std::string merges, ReadRegularFile(merges_path, "tokenizer merges file", kMaxTokenizerFileBytes));
  return Build(vocab, merges, vocab_path, merges_path, dir);
}

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Gpt2Tokenizer::FromStrings(std::string_view vocab_json,
                                                                          std::string_view merges_txt,
                                                                          const std::string& source) {
  return Build(vocab_json, merges_txt, source, source, source);
}

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Gpt2Tokenizer::Build(std::string_view vocab_json,
                                                                    std::string_view merges_txt,
                                                                    const std::string& vocab_name,
                                                                    const std::string& merges_name,
                                                                    const std::string& source) {
  std::unique_ptr<Gpt2Tokenizer> t(new Gpt2Tokenizer());
  t->source_ = source;
  t->instance_id_ = next_instance_id.fetch_add(1);
  Crc32cStream crc;
  for (const std::string_view file : {vocab_json, merges_txt}) {
    const uint64_t size = file.size();
    crc.Update(&size, sizeof(size));
    crc.Update(file.data(), file.size());
  }
  t->content_crc32c_ = crc.value();

  const std::vector<uint32_t> cp_of_byte = BytesToUnicode();
  absl::flat_hash_map<uint32_t, uint8_t> byte_of;
  for (int b = 0; b < 256; ++b) byte_of[cp_of_byte[b]] = static_cast<uint8_t>(b);

  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(vocab_json);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(vocab_name, ": not valid JSON: ", e.what()));
  }
  if (!vocab.is_object() || vocab.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(vocab_name, ": expected a JSON object of token -> id"));
  }
  absl::flat_hash_map<std::string, int32_t> id_of;
  id_of.reserve(vocab.size());
  int64_t max_id = -1;
  // The ids of n entries are 0 ... n - 1, each once (as in GPT-2's encoder.json): what
  // is allocated per id is then bounded by the file's size.
  const auto entries = static_cast<int64_t>(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() >= entries) {
      return absl::InvalidArgumentError(absl::StrCat(vocab_name, ": token '", it.key(), "' has id ",
                                                     it.value().dump(), ", not an id in [0, ", entries,
                                                     ") (the file has ", entries, " entries)"));
    }
    const auto id = static_cast<int32_t>(it.value().get<int64_t>());
    id_of[it.key()] = id;
    max_id = std::max<int64_t>(max_id, id);
  }
  t->token_bytes_.assign(max_id + 1, "");
  t->has_token_.assign(max_id + 1, false);
  std::string bytes;
  for (const auto& [key, id] : id_of) {
    if (!KeyToBytes(key, byte_of, &bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat(vocab_name, ": token '", key, "' is not in GPT-2's byte-to-unicode alphabet"));
    }
    if (t->has_token_[id]) {
      return absl::InvalidArgumentError(absl::StrCat(vocab_name, ": id ", id, " is used twice"));
    }
    t->token_bytes_[id] = bytes;
    t->has_token_[id] = true;
  }
  std::string single;
  for (int b = 0; b < 256; ++b) {
    single.clear();
    AppendUtf8(cp_of_byte[b], &single);
    auto it = id_of.find(single);
    if (it == id_of.end()) {
      return absl::InvalidArgumentError(absl::StrCat(vocab_name, ": has no token for byte ", b, " ('", single, "')"));
    }
    t->byte_id_[b] = it->second;
  }
  if (auto it = id_of.find("<|endoftext|>"); it != id_of.end()) t->eos_id_ = it->second;

  int32_t rank = 0;
  int64_t line_no = 0;
  for (size_t start = 0; start < merges_txt.size();) {
    size_t end = merges_txt.find('\n', start);
    if (end == std::string_view::npos) end = merges_txt.size();
    std::string_view line = merges_txt.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (line_no == 1 && line.substr(0, 8) == "#version") continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(merges_name, ":", line_no, ": expected two tokens separated by one space, got '", std::string(line), "'"));
    }
    const std::string a(line.substr(0, space)), b(line.substr(space + 1));
    auto ia = id_of.find(a), ib = id_of.find(b), iab = id_of.find(a + b);
    if (ia == id_of.end() || ib == id_of.end() || iab == id_of.end()) {
      const std::string& missing = ia == id_of.end() ? a : ib == id_of.end() ? b : a + b;
      return absl::InvalidArgumentError(
          absl::StrCat(merges_name, ":", line_no, ": token '", missing, "' is not in ", vocab_name));
    }
    // As in encoder.py (a dict over the merge list), a repeated pair keeps its last rank.
    t->merges_[PairKey(ia->second, ib->second)] = Merge{rank++, iab->second};
  }
  if (rank == 0) {
    // Without merges every text encodes to byte-level ids: a truncated or wrong file.
    return absl::InvalidArgumentError(absl::StrCat(merges_name, ": no merges (expected \"a b\" lines after the "
                                                   "optional #version line; an empty or truncated file?)"));
  }
  MS_RETURN_IF_ERROR(t->Compile());
  return t;
}

absl::Status Gpt2Tokenizer::Compile() {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InternalError(absl::StrCat("GPT-2 pattern does not compile at ", offset, ": ",
                                            reinterpret_cast<const char*>(message)));
  }
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return absl::OkStatus();
}

const Gpt2Tokenizer::Merge* Gpt2Tokenizer::FindMerge(int32_t a, int32_t b) const {
  auto it = merges_.find(PairKey(a, b));
  return it == merges_.end() ? nullptr : &it->second;
}

// encoder.py's bpe(): repeatedly take the lowest-ranked adjacent pair and merge every
// occurrence of it, left to right.
void Gpt2Tokenizer::MergeShort(std::vector<int32_t>* word) const {
  std::vector<int32_t>& w = *word;
  while (w.size() > 1) {
    int32_t best_rank = INT32_MAX, first = -1, second = -1, merged = -1;
    for (size_t i = 0; i + 1 < w.size(); ++i) {
      const Merge* m = FindMerge(w[i], w[i + 1]);
      if (m != nullptr && m->rank < best_rank) {
        best_rank = m->rank, first = w[i], second = w[i + 1], merged = m->id;
      }
    }
    if (merged < 0) break;
    size_t out = 0;
    for (size_t i = 0; i < w.size();) {
      if (i + 1 < w.size() && w[i] == first && w[i + 1] == second) {
        w[out++] = merged;
        i += 2;
      } else {
        w[out++] = w[i++];
      }
    }
    w.resize(out);
  }
}

// The same merges in O(n log n): a heap of candidate pairs ordered by (rank, position)
// over a linked list. Taking equal ranks left to right reproduces one scan of
// MergeShort (a merged token's pairs always rank after the merge that made it).
void Gpt2Tokenizer::MergeLong(std::vector<int32_t>* word) const {
  std::vector<int32_t>& w = *word;
  const auto n = static_cast<int32_t>(w.size());
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int32_t i = 0; i < n; ++i) prev[i] = i - 1, next[i] = i + 1 < n ? i + 1 : -1;
  struct Candidate {
    int32_t rank, left, right, left_id, right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t left) {
    if (left < 0 || next[left] < 0) return;
    const int32_t right = next[left];
    if (const Merge* m = FindMerge(w[left], w[right])) heap.push({m->rank, left, right, w[left], w[right]});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    if (!alive[c.left] || !alive[c.right] || next[c.left] != c.right || w[c.left] != c.left_id ||
        w[c.right] != c.right_id) {
      continue;  // stale
    }
    w[c.left] = FindMerge(c.left_id, c.right_id)->id;
    alive[c.right] = false;
    next[c.left] = next[c.right];
    if (next[c.right] >= 0) prev[next[c.right]] = c.left;
    push(prev[c.left]);
    push(c.left);
  }
  size_t out = 0;
  for (int32_t i = 0; i >= 0 && i < n; i = next[i]) w[out++] = w[i];
  w.resize(out);
}

void Gpt2Tokenizer::EncodePiece(Scratch& s, std::string_view piece, std::vector<int32_t>* ids) const {
  if (piece.size() <= 32) {
    auto it = s.cache.find(absl::string_view(piece.data(), piece.size()));
    if (it != s.cache.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t>& w = s.word;
  w.resize(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) w[i] = byte_id_[static_cast<uint8_t>(piece[i])];
  if (piece.size() > kLongPiece) {
    MergeLong(&w);
  } else {
    MergeShort(&w);
  }
  ids->insert(ids->end(), w.begin(), w.end());
  if (piece.size() <= 32) {
    if (s.cache.size() >= kCacheEntries) s.cache.clear();
    s.cache.emplace(std::string(piece), w);
  }
}

template <typename F>
absl::Status Gpt2Tokenizer::ForEachPiece(std::string_view text, F&& on_piece) const {
  if (const int64_t bad = FindInvalidUtf8(text); bad >= 0) {
    return absl::InvalidArgumentError(absl::StrCat("invalid UTF-8 at byte ", bad));
  }
  Scratch& s = ThreadScratch();
  auto* code = static_cast<pcre2_code*>(code_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0;
  while (offset < text.size()) {
    const int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), offset, 0, s.match, s.context)
                        : pcre2_match(code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK, s.match, s.context);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.match);
    if (rc < 0 || ov[0] != offset || ov[1] <= ov[0]) {
      // Cannot happen for valid UTF-8 (every character matches one alternative).
      return absl::InternalError(absl::StrCat("GPT-2 pre-tokenizer failed at byte ", offset, " (pcre2 ", rc, ")"));
    }
    on_piece(text.substr(ov[0], ov[1] - ov[0]));
    offset = ov[1];
  }
  return absl::OkStatus();
}

absl::Status Gpt2Tokenizer::Encode(std::string_view text, std::vector<int32_t>* ids) const {
  const size_t before = ids->size();
  Scratch& s = ThreadScratch();
  absl::Status status = ForEachPiece(text, [&](std::string_view piece) { EncodePiece(s, piece, ids); });
  if (!status.ok()) ids->resize(before);
  return status;
}

absl::StatusOr<std::vector<std::string_view>> Gpt2Tokenizer::Split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  MS_RETURN_IF_ERROR(ForEachPiece(text, [&](std::string_view piece) { pieces.push_back(piece); }));
  return pieces;
}

absl::StatusOr<std::vector<int32_t>> Gpt2Tokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> ids;
  MS_RETURN_IF_ERROR(Encode(text, &ids));
  return ids;
}

absl::StatusOr<std::string> Gpt2Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size() || !has_token_[id]) {
      return absl::InvalidArgumentError(
          absl::StrCat("token ", i, " has id ", id, ", not in the vocabulary [0, ", vocab_size(), ")"));
    }
    out += token_bytes_[id];
  }
  return out;
}

}  // namespace multiscreen
