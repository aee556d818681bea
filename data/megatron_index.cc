#include "data/megatron_index.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/input_file.h"
#include "common/status.h"
#include "data/byte_source.h"

namespace multiscreen {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kHeaderBytes = kMegatronIndexMagicBytes + 8 + 1 + 8 + 8;  // 34
// Far beyond any real index (2^40 bytes), and small enough that sizes never overflow.
constexpr int64_t kMaxIndexBytes = int64_t{1} << 40;

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

const char* DtypeName(int code) {
  switch (code) {
    case 1: return "uint8";
    case 2: return "int8";
    case 3: return "int16";
    case 4: return "int32";
    case 5: return "int64";
    case 6: return "float64";
    case 7: return "float32";
    case 8: return "uint16";
    default: return nullptr;
  }
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool IsFile(const std::string& p) {
  std::error_code ec;
  return fs::exists(p, ec) && !fs::is_directory(p, ec);
}

}  // namespace

bool FindMegatronPair(const std::string& path, std::string* bin, std::string* idx) {
  std::string prefix = path;
  if (EndsWith(path, ".bin") || EndsWith(path, ".idx")) prefix = path.substr(0, path.size() - 4);
  if (!IsFile(prefix + ".bin") || !IsFile(prefix + ".idx")) return false;
  // "<prefix>" itself must not be a file of its own (then it is that file).
  if (prefix == path && IsFile(path)) return false;
  *bin = prefix + ".bin";
  *idx = prefix + ".idx";
  return true;
}

absl::StatusOr<std::unique_ptr<MegatronIndex>> MegatronIndex::Open(const std::string& idx_path,
                                                                   const std::string& bin_path) {
  int64_t size = 0;
  auto fd = OpenRegularFile(idx_path, "Megatron index", kMaxIndexBytes, &size);
  if (!fd.ok()) return fd.status();
  if (size < kHeaderBytes) {
    ::close(*fd);
    return absl::InvalidArgumentError(absl::StrCat(idx_path, ": ", size, " bytes, shorter than the ", kHeaderBytes,
                                                   "-byte Megatron index header"));
  }
  void* map = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_SHARED, *fd, 0);
  ::close(*fd);
  if (map == MAP_FAILED) return absl::InternalError(absl::StrCat(idx_path, ": mmap failed"));
  std::unique_ptr<MegatronIndex> index(new MegatronIndex());
  index->path_ = idx_path;
  index->map_ = map;
  index->map_bytes_ = static_cast<size_t>(size);
  const auto* p = static_cast<const uint8_t*>(map);
  auto fail = [&](const std::string& what) { return absl::InvalidArgumentError(absl::StrCat(idx_path, ": ", what)); };

  if (std::memcmp(p, kMegatronIndexMagic, kMegatronIndexMagicBytes) != 0) {
    MS_RETURN_IF_ERROR(CompressedTokenDataError(
        idx_path, MagicCompression(std::string_view(reinterpret_cast<const char*>(p), kMegatronIndexMagicBytes))));
    return fail(absl::StrCat("unknown magic \"",
                             absl::CHexEscape(std::string(reinterpret_cast<const char*>(p), kMegatronIndexMagicBytes)),
                             "\" (expected \"MMIDIDX\\x00\\x00\", a Megatron-LM .idx)"));
  }
  const uint64_t version = Load<uint64_t>(p + 9);
  if (version != 1) return fail(absl::StrCat("unknown Megatron index version ", version, " (expected 1)"));
  const int code = p[17];
  const char* dtype = DtypeName(code);
  if (dtype == nullptr) return fail(absl::StrCat("unknown dtype code ", code, " (Megatron's codes are 1 to 8)"));
  if (code != 8 && code != 4) {
    return fail(absl::StrCat("token dtype ", dtype, " (code ", code, ") is not supported: expected uint16 (8) or int32 (4)"));
  }
  index->dtype_code_ = code;
  index->width_ = code == 8 ? 2 : 4;
  const uint64_t s = Load<uint64_t>(p + 18), d = Load<uint64_t>(p + 26);
  // Every count fits the file: no multiplication below can overflow.
  if (s > uint64_t(size) || d > uint64_t(size)) {
    return fail(absl::StrCat("header says ", s, " sequences and ", d, " document indices, more than its ", size,
                             " bytes can hold"));
  }
  const int64_t expected = kHeaderBytes + int64_t(s) * (4 + 8) + int64_t(d) * 8;
  if (size != expected && size != expected + int64_t(s)) {  // + int8 modes: multimodal
    return fail(absl::StrCat("header says ", s, " sequences and ", d, " document indices (", expected,
                             " bytes) but the file has ", size, " bytes"));
  }
  if (d < 1) return fail("no document indices (expected documents + 1 >= 1 entries starting at 0)");
  index->num_sequences_ = int64_t(s);
  index->num_documents_ = int64_t(d) - 1;
  index->lengths_ = p + kHeaderBytes;
  index->pointers_ = index->lengths_ + 4 * s;
  index->documents_ = index->pointers_ + 8 * s;
  int64_t tokens = 0;
  for (uint64_t i = 0; i < s; ++i) {
    const int32_t len = Load<int32_t>(index->lengths_ + 4 * i);
    if (len < 0) return fail(absl::StrCat("sequence ", i, " has length ", len));
    const int64_t ptr = Load<int64_t>(index->pointers_ + 8 * i);
    if (ptr != tokens * index->width_) {
      return fail(absl::StrCat("sequence ", i, " starts at byte ", ptr, " of the .bin, not at ", tokens * index->width_,
                               " where the sequences before it end (only back-to-back sequences are read)"));
    }
    tokens += len;
  }
  int64_t previous = 0;
  for (uint64_t i = 0; i < d; ++i) {
    const int64_t v = Load<int64_t>(index->documents_ + 8 * i);
    if ((i == 0 && v != 0) || v < previous || v > int64_t(s) || (i + 1 == d && v != int64_t(s))) {
      return fail(absl::StrCat("document index ", i, " is ", v, " (expected a non-decreasing run from 0 to ", s,
                               " sequences)"));
    }
    previous = v;
  }
  index->num_tokens_ = tokens;
  std::error_code ec;
  const auto bin_size = fs::file_size(bin_path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(bin_path, ": cannot read its size (", ec.message(), ")"));
  if (int64_t(bin_size) != tokens * index->width_) {
    MS_RETURN_IF_ERROR(CompressedTokenDataError(bin_path, FileMagicCompression(bin_path)));
    return absl::InvalidArgumentError(absl::StrCat(bin_path, ": ", bin_size, " bytes, but its index ", idx_path,
                                                   " lists ", tokens, " ", dtype, " tokens (", tokens * index->width_,
                                                   " bytes)"));
  }
  return index;
}

MegatronIndex::~MegatronIndex() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

int32_t MegatronIndex::sequence_length(int64_t i) const { return Load<int32_t>(lengths_ + 4 * i); }

std::pair<int64_t, int64_t> MegatronIndex::document_tokens(int64_t d) const {
  const int64_t first = Load<int64_t>(documents_ + 8 * d), last = Load<int64_t>(documents_ + 8 * (d + 1));
  // Back to back: a sequence's token offset is its pointer over the itemsize.
  const int64_t begin = first < num_sequences_ ? Load<int64_t>(pointers_ + 8 * first) / width_ : num_tokens_;
  const int64_t end = last < num_sequences_ ? Load<int64_t>(pointers_ + 8 * last) / width_ : num_tokens_;
  return {begin, end};
}

std::vector<int64_t> MegatronIndex::DocumentBoundaries() const {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(num_documents_ + 1));
  for (int64_t doc = 0; doc < num_documents_; ++doc) out.push_back(document_tokens(doc).first);
  out.push_back(num_tokens_);
  return out;
}

}  // namespace multiscreen
