// Megatron-LM indexed datasets: the `.bin` / `.idx` pair that Megatron-LM's
// tools/preprocess_data.py writes (megatron/core/datasets/indexed_dataset.py,
// IndexedDatasetBuilder and _IndexWriter; the layout is fairseq's "MMapIndexedDataset").
//
// `<prefix>.bin`: the tokens of every sequence, back to back, no header, each token one
// element of the index's dtype (little-endian).
// `<prefix>.idx`, little-endian, packed:
//   bytes 0-8     magic "MMIDIDX\0\0" (9 bytes)
//   uint64        version, 1
//   uint8         dtype code: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64,
//                 7 float32, 8 uint16 (token files use 8 for vocabularies < 65,500, else 4)
//   uint64        S, the number of sequences
//   uint64        D, the length of the document index array (documents + 1)
//   int32[S]      sequence lengths, in tokens
//   int64[S]      sequence pointers: byte offset of each sequence in .bin (the running
//                 sum of length x itemsize, starting at 0)
//   int64[D]      document indices: document d is sequences [idx[d], idx[d + 1]); idx[0]
//                 = 0 and idx[D - 1] = S. (preprocess_data.py writes one sequence per
//                 document unless it splits sentences; a document may have 0 tokens.)
//   int8[S]       sequence modes, only in multimodal datasets (accepted, ignored)
//
// This reader accepts the token dtypes Megatron writes for text: uint16 (8) and int32 (4).
// It requires the sequences to lie back to back in .bin in index order (pointers[i] =
// the tokens before i times the itemsize, what the builder and merge tool write), so that
// the documents in order are the .bin file itself: the same token stream as an llm.c
// shard holding those tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace multiscreen {

inline constexpr char kMegatronIndexMagic[] = "MMIDIDX\0\0";  // 9 bytes with the implicit NUL trimmed
inline constexpr int kMegatronIndexMagicBytes = 9;

// The .idx of a Megatron pair, memory-mapped and checked against its .bin.
class MegatronIndex {
 public:
  // Opens `idx_path` and checks it, and its agreement with `bin_path`'s size. Errors name
  // the file: missing or not a regular file, shorter than the header, an unknown magic,
  // version or dtype code (or a dtype other than uint16/int32), a size other than the
  // header and arrays it announces, negative lengths, pointers that are not back to back,
  // document indices that do not run from 0 to S without decreasing, and a .bin whose
  // size differs from the tokens the index holds.
  static absl::StatusOr<std::unique_ptr<MegatronIndex>> Open(const std::string& idx_path,
                                                             const std::string& bin_path);
  ~MegatronIndex();
  MegatronIndex(const MegatronIndex&) = delete;
  MegatronIndex& operator=(const MegatronIndex&) = delete;

  int dtype_code() const { return dtype_code_; }
  int64_t token_bytes() const { return width_; }        // 2 (uint16) or 4 (int32)
  int64_t num_tokens() const { return num_tokens_; }    // the .bin's size / token_bytes()
  int64_t num_sequences() const { return num_sequences_; }
  int64_t num_documents() const { return num_documents_; }  // D - 1
  int32_t sequence_length(int64_t i) const;
  // Token offsets [begin, end) of document d in the .bin (0 <= d < num_documents()).
  std::pair<int64_t, int64_t> document_tokens(int64_t d) const;
  // The first token of every document, then num_tokens(): num_documents() + 1 offsets.
  std::vector<int64_t> DocumentBoundaries() const;

 private:
  MegatronIndex() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint8_t* lengths_ = nullptr;   // int32[S]
  const uint8_t* pointers_ = nullptr;  // int64[S]
  const uint8_t* documents_ = nullptr; // int64[D]
  int dtype_code_ = 0;
  int64_t width_ = 2, num_tokens_ = 0, num_sequences_ = 0, num_documents_ = 0;
};

// The pair a user names by `path`: "<prefix>.bin", "<prefix>.idx" or "<prefix>" itself.
// Sets *bin and *idx and returns true when both files exist; false otherwise.
bool FindMegatronPair(const std::string& path, std::string* bin, std::string* idx);

}  // namespace multiscreen
