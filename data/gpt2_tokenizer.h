// GPT-2's byte-level BPE tokenizer (OpenAI's encoder.py, token for token), read from the
// standard files: `vocab.json` (or `encoder.json`) and `merges.txt` (or `vocab.bpe`).
//
// Encoding: the text (UTF-8) is split by GPT-2's pre-tokenization pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (PCRE2, Unicode properties; \s is Unicode White_Space, as in the Python and Rust
// references), each piece's bytes are mapped to byte tokens and merged by BPE rank
// (the lowest-ranked adjacent pair first, all its occurrences left to right).
// Special tokens such as <|endoftext|> are not recognized inside text: the string is
// encoded as ordinary characters, as encoder.py does. Invalid UTF-8 is rejected with
// the byte offset of the first bad sequence (the references accept only valid text;
// `prepare` repairs corpora first, data/utf8.h).
// Decoding concatenates the tokens' bytes, so decode(encode(s)) == s for valid UTF-8.
//
// A tokenizer is immutable after loading and safe to share between threads; each
// thread keeps its own regex scratch and piece cache.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "data/utf8.h"  // FindInvalidUtf8

namespace multiscreen {

class Gpt2Tokenizer {
 public:
  // Largest vocabulary or merges file read (GPT-2's are 1 MiB and 456 KiB).
  static constexpr int64_t kMaxTokenizerFileBytes = int64_t{64} << 20;

  // Loads `dir`/vocab.json (else encoder.json) and `dir`/merges.txt (else vocab.bpe).
  // Errors name the file (and line for merges): missing files, not regular files (a
  // directory, a FIFO, /dev/zero) or larger than kMaxTokenizerFileBytes, and the
  // errors of FromStrings.
  static absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Load(const std::string& dir);

  // Builds a tokenizer from the contents of the two files (`vocab_json`: token string ->
  // id; `merges_txt`: "#version" line optional, then "a b" per line, rank = order).
  // `source` names the origin in error messages. Errors: malformed JSON, ids that are
  // not 0 ... n - 1 for n entries (each once), a token outside GPT-2's byte alphabet, a
  // vocabulary without all 256 bytes, no merges, a merge whose parts or result are not
  // in the vocabulary (with its line).
  static absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> FromStrings(std::string_view vocab_json,
                                                                    std::string_view merges_txt,
                                                                    const std::string& source = "<memory>");

  ~Gpt2Tokenizer();
  Gpt2Tokenizer(const Gpt2Tokenizer&) = delete;
  Gpt2Tokenizer& operator=(const Gpt2Tokenizer&) = delete;

  // Appends the ids of `text` to `ids`. Errors: "invalid UTF-8 at byte N" (N counted
  // from the start of `text`); `ids` is left as it was.
  absl::Status Encode(std::string_view text, std::vector<int32_t>* ids) const;
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const;

  // The pre-tokenization alone: `text` cut into the pieces that BPE merges within.
  // Errors as Encode.
  absl::StatusOr<std::vector<std::string_view>> Split(std::string_view text) const;

  // The bytes of `ids` concatenated (may be invalid UTF-8 when cut mid-character).
  // Errors: an id outside [0, vocab_size()).
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const;

  // The number of tokens, one past the largest id (50,257 for GPT-2).
  int32_t vocab_size() const { return static_cast<int32_t>(token_bytes_.size()); }
  // Id of "<|endoftext|>" (50,256 for GPT-2), or -1 when the vocabulary has none.
  int32_t eos_id() const { return eos_id_; }
  // Where the tokenizer came from (directory or `source`).
  const std::string& source() const { return source_; }
  // CRC-32C of the two files' bytes (each after its length as a little-endian uint64):
  // what `eval ... --resume` compares to know the text is encoded as before, wherever the
  // files now lie.
  uint32_t content_crc32c() const { return content_crc32c_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  struct Scratch;

  Gpt2Tokenizer() = default;
  static absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Build(std::string_view vocab_json,
                                                             std::string_view merges_txt,
                                                             const std::string& vocab_name,
                                                             const std::string& merges_name,
                                                             const std::string& source);
  absl::Status Compile();
  Scratch& ThreadScratch() const;
  // Calls on_piece(piece) for each pre-tokenized piece of valid UTF-8 `text`.
  template <typename F>
  absl::Status ForEachPiece(std::string_view text, F&& on_piece) const;
  // BPE of one pre-tokenized piece; appends ids.
  void EncodePiece(Scratch& scratch, std::string_view piece, std::vector<int32_t>* ids) const;
  void MergeShort(std::vector<int32_t>* word) const;
  void MergeLong(std::vector<int32_t>* word) const;
  const Merge* FindMerge(int32_t a, int32_t b) const;

  std::string source_;
  std::vector<std::string> token_bytes_;  // id -> bytes ("" for ids with no token)
  std::vector<bool> has_token_;
  int32_t byte_id_[256] = {};             // byte -> id of its single-byte token
  absl::flat_hash_map<uint64_t, Merge> merges_;  // (a << 32 | b) -> rank, merged id
  int32_t eos_id_ = -1;
  uint32_t content_crc32c_ = 0;
  uint64_t instance_id_ = 0;              // keys the per-thread scratch
  void* code_ = nullptr;                  // pcre2_code_8*
  bool jit_ = false;

  friend class Gpt2TokenizerTestPeer;
};

}  // namespace multiscreen
