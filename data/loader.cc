#include "data/loader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <new>

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"
#include "common/input_file.h"
#include "common/status.h"
#include "data/byte_source.h"
#include "data/token_file.h"

namespace multiscreen {
namespace {

namespace fs = std::filesystem;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The epoch's base key: splitmix64(splitmix64(seed) ^ epoch).
uint64_t EpochKey(uint64_t seed, int64_t epoch) { return SplitMix64(SplitMix64(seed) ^ static_cast<uint64_t>(epoch)); }

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

absl::Status CheckLayout(int64_t seq_len, int64_t global_batch, int dp_rank, int dp_size) {
  if (seq_len < 1) return absl::InvalidArgumentError(absl::StrCat("seq_len ", seq_len, " (expected >= 1)"));
  if (global_batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("global batch ", global_batch, " (expected >= 1)"));
  }
  if (dp_size < 1 || dp_rank < 0 || dp_rank >= dp_size) {
    return absl::InvalidArgumentError(absl::StrCat("dp rank ", dp_rank, " of ", dp_size));
  }
  if (global_batch % dp_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("global batch ", global_batch, " is not divisible by the data-parallel degree ", dp_size));
  }
  return absl::OkStatus();
}

}  // namespace

// ---------------------------------------------------------------------------

absl::StatusOr<TokenFormat> ParseTokenFormat(const std::string& name) {
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "auto" || lower.empty() || lower == "format_auto") return TokenFormat::kAuto;
  if (lower == "llmc") return TokenFormat::kLlmc;
  if (lower == "megatron") return TokenFormat::kMegatron;
  if (lower == "raw_uint16") return TokenFormat::kRawUint16;
  return absl::InvalidArgumentError(
      absl::StrCat("format=", name, ": expected auto, llmc, megatron or raw_uint16"));
}

namespace {

// A directory's shards numbered with a gap (train_000000.bin, then train_000005.bin) are
// usually shards lost in a copy: refused, naming the missing ones. Shards are grouped by
// their name without the digits before ".bin" (llm.c's fineweb_train_000001.bin ... and
// ours, train_000000.bin ..., apart); each group must count up by one from its first.
absl::Status CheckShardNumbering(const std::string& dir, const std::string& split, const std::vector<std::string>& shards) {
  struct Group {
    std::vector<int64_t> numbers;
    size_t width = 0;
  };
  std::map<std::string, Group> groups;  // by the name before the digits
  for (const std::string& shard : shards) {
    const std::string name = fs::path(shard).filename().string();
    const size_t end = name.size() - 4;  // before ".bin"
    size_t begin = end;
    while (begin > 0 && std::isdigit(static_cast<unsigned char>(name[begin - 1]))) --begin;
    if (begin == end || end - begin > 18) continue;
    Group& g = groups[name.substr(0, begin)];
    g.numbers.push_back(std::stoll(name.substr(begin, end - begin)));
    g.width = end - begin;
  }
  std::vector<std::string> missing;
  for (auto& [prefix, g] : groups) {
    std::sort(g.numbers.begin(), g.numbers.end());
    const std::string& before = prefix;
    auto named = [&](int64_t n) {
      std::string digits = std::to_string(n);
      if (digits.size() < g.width) digits.insert(0, g.width - digits.size(), '0');
      return absl::StrCat(before, digits, ".bin");
    };
    for (size_t i = 1; i < g.numbers.size(); ++i) {
      const int64_t from = g.numbers[i - 1] + 1, to = g.numbers[i] - 1;
      if (from > to) continue;
      missing.push_back(from == to ? named(from) : absl::StrCat(named(from), " to ", named(to)));
    }
  }
  if (missing.empty()) return absl::OkStatus();
  std::string list;
  for (size_t i = 0; i < missing.size(); ++i) {
    absl::StrAppend(&list, i == 0 ? "" : i + 1 == missing.size() ? " and " : ", ", missing[i]);
  }
  const bool one = missing.size() == 1 && missing[0].find(" to ") == std::string::npos;
  return absl::FailedPreconditionError(absl::StrCat(
      dir, ": ", list, one ? " is" : " are",
      " missing from the numbering (lost shards?); ",
      split == "train" ? "to use the shards there alone, name each file (data.train_shards in a run file)"
                       : "to use one shard alone, name the file itself"));
}

// The suffixes of compressed files a shard directory may hold by mistake: what prepare
// decompresses (.gz, .zst) and the other common ones.
bool IsCompressionSuffix(std::string suffix) {
  for (char& c : suffix) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return suffix == ".gz" || suffix == ".zst" || suffix == ".xz" || suffix == ".bz2" || suffix == ".lz4";
}

// Files of directory `dir` named as compressed shards of `split` (train_000001.bin.gz),
// which the listing (*.bin) would leave out in silence: one line for the first of them
// (sorted) — a copy beside its decompressed file (move it out), compressed data as its
// bytes say (the command that decompresses it), or a compressed name on something else —
// and how many there are.
absl::Status CompressedShardsError(const std::string& dir, const std::string& split, std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  const std::string& first = names[0];
  const std::string plain = first.substr(0, first.rfind('.'));
  std::error_code ec;
  std::string what;
  if (fs::exists(plain, ec)) {
    what = absl::StrCat(first, ": a compressed copy of ", plain, ", which is there too: move it out of the directory");
  } else if (const Compression held = FileMagicCompression(first);
             held != Compression::kNone && held == NamedCompression(first)) {
    what = std::string(CompressedTokenDataError(first, held).message());
  } else {
    what = absl::StrCat(first, ": a compressed file's name (", first.substr(first.rfind('.')),
                        "); token files are read as they are stored, and only *.bin: decompress it to ", plain,
                        " or move it out of the directory");
  }
  const bool one = names.size() == 1;
  return absl::InvalidArgumentError(absl::StrCat(what, "; ", names.size(), one ? " file" : " files", " in ", dir,
                                                 one ? " is named as a compressed " : " are named as compressed ", split,
                                                 one ? " shard" : " shards", " (*.bin is read)"));
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ListShards(const std::string& path, const std::string& split,
                                                    TokenFormat format) {
  std::error_code ec;
  std::string bin, idx;
  // A Megatron pair named by its prefix is one source; TokenStream::Open resolves it.
  if (format != TokenFormat::kLlmc && format != TokenFormat::kRawUint16 && FindMegatronPair(path, &bin, &idx)) {
    return std::vector<std::string>{path};
  }
  // Anything but a directory is one shard: TokenStream::Open says what is wrong with it.
  if (!fs::exists(path, ec)) return absl::NotFoundError(absl::StrCat(path, ": no such shard file or directory"));
  // The marker is looked for beside a named shard too (--data=DIR/train_000000.bin).
  const fs::path dir = fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
  if (!dir.empty() && fs::exists(dir / kPrepareIncompleteMarker, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": a `prepare` into ", dir.string(), " was interrupted while moving its shards into place (",
        (dir / kPrepareIncompleteMarker).string(), "), so new and stale shards may be mixed: run it again"));
  }
  if (!fs::is_directory(path, ec)) return std::vector<std::string>{path};
  std::vector<std::string> shards, compressed;
  const std::string prefix = split + "_", infix = "_" + split + "_";
  const auto is_shard = [&](const std::string& name) {
    return EndsWith(name, ".bin") && (name.rfind(prefix, 0) == 0 || name.find(infix) != std::string::npos ||
                                      (format == TokenFormat::kRawUint16 && name == split + ".bin"));
  };
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const std::string name = entry.path().filename().string();
    if (is_shard(name)) shards.push_back(entry.path().string());
    // train_000001.bin.gz: a shard the loader cannot read as stored, and would leave out.
    if (const size_t dot = name.rfind('.'); dot != std::string::npos && is_shard(name.substr(0, dot)) &&
                                            IsCompressionSuffix(name.substr(dot))) {
      compressed.push_back(entry.path().string());
    }
  }
  if (!compressed.empty()) return CompressedShardsError(path, split, compressed);
  if (shards.empty()) {
    return absl::NotFoundError(absl::StrCat(path, ": no ", split, " shards (", split, "_*.bin",
                                            format == TokenFormat::kRawUint16 ? absl::StrCat(" or ", split, ".bin") : "",
                                            ") in the directory"));
  }
  std::sort(shards.begin(), shards.end());
  MS_RETURN_IF_ERROR(CheckShardNumbering(path, split, shards));
  return shards;
}

namespace {

// Maps `path` (already open as `fd`, `file_size` bytes) read-only; closes fd.
absl::StatusOr<void*> MapFile(const std::string& path, int fd, int64_t file_size) {
  if (file_size == 0) {
    ::close(fd);
    return nullptr;
  }
  void* map = ::mmap(nullptr, static_cast<size_t>(file_size), PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return absl::InternalError(absl::StrCat(path, ": mmap failed"));
  return map;
}

// The largest headerless token file accepted (raw uint16, a Megatron .bin): 2^46 bytes.
constexpr int64_t kMaxRawTokenBytes = int64_t{1} << 46;

}  // namespace

absl::StatusOr<std::unique_ptr<TokenStream>> TokenStream::Open(const std::vector<std::string>& paths,
                                                               int64_t min_tokens_per_shard, TokenFormat format) {
  if (paths.empty()) return absl::InvalidArgumentError("no token shards given");
  std::unique_ptr<TokenStream> stream(new TokenStream());
  stream->paths_ = paths;
  for (const std::string& path : paths) {
    Shard shard;
    std::string bin, idx;
    TokenFormat f = format;
    const bool pair = f != TokenFormat::kLlmc && f != TokenFormat::kRawUint16 && FindMegatronPair(path, &bin, &idx);
    if (f == TokenFormat::kMegatron && !pair) {
      std::string prefix = path;
      if (EndsWith(path, ".bin") || EndsWith(path, ".idx")) prefix.resize(prefix.size() - 4);
      return absl::NotFoundError(
          absl::StrCat(path, ": not a Megatron pair (", prefix, ".bin and ", prefix, ".idx must both exist)"));
    }
    if (pair) f = TokenFormat::kMegatron;
    if (f == TokenFormat::kMegatron) {
      auto index = MegatronIndex::Open(idx, bin);
      if (!index.ok()) return index.status();
      int64_t file_size = 0;
      auto opened = OpenRegularFile(bin, "Megatron .bin", kMaxRawTokenBytes, &file_size);
      if (!opened.ok()) return opened.status();
      MS_ASSIGN_OR_RETURN(void* map, MapFile(bin, *opened, file_size));
      shard.map = map;
      shard.map_bytes = static_cast<size_t>(file_size);
      shard.tokens = static_cast<const uint8_t*>(map);
      shard.width = (*index)->token_bytes();
      shard.count = (*index)->num_tokens();
      shard.megatron = std::shared_ptr<const MegatronIndex>(std::move(*index));
    } else {
      // A regular file only (a FIFO would block, a device never end), no larger than
      // the format allows; then the header (if any) against the size.
      int64_t file_size = 0;
      auto opened = OpenRegularFile(path, "token shard", f == TokenFormat::kLlmc ? kMaxTokenFileBytes
                                                                                 : kMaxRawTokenBytes, &file_size);
      if (!opened.ok()) return opened.status();
      const int fd = *opened;
      int32_t header[kTokenFileHeaderInts] = {};
      const ssize_t got = ::pread(fd, header, sizeof(header), 0);
      (void)got;  // a short read leaves zeros; CheckTokenFileHeader rejects the size
      if (f == TokenFormat::kAuto) {
        if (EndsWith(path, ".u16") || EndsWith(path, ".uint16")) {
          f = TokenFormat::kRawUint16;
        } else if (header[0] == kTokenFileMagic || file_size < int64_t{sizeof(header)}) {
          f = TokenFormat::kLlmc;  // CheckTokenFileHeader says what is wrong with a short file
        } else if (auto compressed = CompressedTokenDataError(
                       path, MagicCompression(std::string_view(reinterpret_cast<const char*>(header), sizeof(header))));
                   !compressed.ok()) {
          ::close(fd);
          return compressed;
        } else {
          ::close(fd);
          return absl::InvalidArgumentError(absl::StrCat(
              path, ": bad magic ", header[0], " (expected ", kTokenFileMagic,
              ", llm.c .bin; no .idx beside it for a Megatron pair; a headerless nanoGPT file needs "
              "--format=raw_uint16)"));
        }
      }
      if (f == TokenFormat::kLlmc) {
        if (file_size > kMaxTokenFileBytes) {
          ::close(fd);
          return absl::InvalidArgumentError(absl::StrCat(path, ": ", file_size, " bytes, larger than an llm.c shard can be"));
        }
        auto info = CheckTokenFileHeader(path, header, file_size);
        if (!info.ok()) {
          ::close(fd);
          return info.status();
        }
        MS_ASSIGN_OR_RETURN(void* map, MapFile(path, fd, file_size));
        shard.map = map;
        shard.map_bytes = static_cast<size_t>(file_size);
        shard.tokens = static_cast<const uint8_t*>(map) + kTokenFileHeaderInts * 4;
        shard.count = info->count;
        shard.width = info->width;
      } else {  // raw uint16
        // Said explicitly of a file that is another format: read raw, llm.c's header
        // would become 512 tokens of training data, a Megatron .bin its documents
        // without their boundaries (issue 31: a 300-token llm.c shard trained on the
        // header's zeros to loss 0.017). Refused, naming the format it is.
        if (header[0] == kTokenFileMagic && CheckTokenFileHeader(path, header, file_size).ok()) {
          ::close(fd);
          return absl::InvalidArgumentError(absl::StrCat(
              path, ": --format=raw_uint16, but the file starts with llm.c's header (magic ", kTokenFileMagic,
              "): read raw, its header would be trained on; it is --format=llmc (or auto)"));
        }
        if (std::string b, i; FindMegatronPair(path, &b, &i)) {
          ::close(fd);
          return absl::InvalidArgumentError(absl::StrCat(path, ": --format=raw_uint16, but ", i,
                                                         " is beside it: a Megatron pair is --format=megatron (or auto)"));
        }
        if (auto compressed = CompressedTokenDataError(
                path, MagicCompression(std::string_view(reinterpret_cast<const char*>(header), sizeof(header))));
            !compressed.ok()) {
          ::close(fd);
          return compressed;
        }
        if (file_size % 2 != 0) {
          ::close(fd);
          return absl::InvalidArgumentError(
              absl::StrCat(path, ": ", file_size, " bytes, an odd size for headerless uint16 tokens (raw_uint16)"));
        }
        MS_ASSIGN_OR_RETURN(void* map, MapFile(path, fd, file_size));
        shard.map = map;
        shard.map_bytes = static_cast<size_t>(file_size);
        shard.tokens = static_cast<const uint8_t*>(map);
        shard.count = file_size / 2;
        shard.width = 2;
      }
    }
    shard.format = f;
    shard.first = stream->size_;
    stream->size_ += shard.count;
    stream->shards_.push_back(std::move(shard));
  }
  MS_RETURN_IF_ERROR(stream->CheckShardSizes(min_tokens_per_shard));
  return stream;
}

std::string TokenStream::Locate(int64_t pos) const {
  auto it = std::upper_bound(shards_.begin(), shards_.end(), pos, [](int64_t v, const Shard& s) { return v < s.first; });
  const size_t k = static_cast<size_t>(it - shards_.begin()) - 1;
  return absl::StrCat(paths_[k], ": token ", pos - shards_[k].first);
}

absl::StatusOr<std::vector<int64_t>> TokenStream::DocumentBoundaries() const {
  std::vector<int64_t> out;
  for (size_t i = 0; i < shards_.size(); ++i) {
    if (shards_[i].megatron == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          paths_[i], ": no document index (not a Megatron pair; its documents are separated by EOS only)"));
    }
    std::vector<int64_t> b = shards_[i].megatron->DocumentBoundaries();
    b.pop_back();
    for (int64_t v : b) out.push_back(shards_[i].first + v);
  }
  out.push_back(size_);
  return out;
}

absl::Status TokenStream::CheckShardSizes(int64_t min_tokens) const {
  for (size_t i = 0; i < shards_.size(); ++i) {
    if (shards_[i].count < min_tokens) {
      return absl::InvalidArgumentError(absl::StrCat(paths_[i], ": holds ", shards_[i].count,
                                                     " tokens, fewer than the ", min_tokens,
                                                     " a window needs (seq_len + 1)"));
    }
  }
  return absl::OkStatus();
}

TokenStream::~TokenStream() {
  for (const Shard& s : shards_) {
    if (s.map != nullptr) ::munmap(s.map, s.map_bytes);
  }
}

std::string TokenStream::Fingerprint() const {
  constexpr int64_t kBlocks = 256, kBlock = 1024;
  Crc32cStream crc;
  crc.Update(&size_, sizeof(size_));
  std::vector<int32_t> block(kBlock);
  const int64_t span = std::max<int64_t>(0, size_ - kBlock);  // where the last block starts
  for (int64_t b = 0; b < kBlocks; ++b) {
    const int64_t start = span * b / (kBlocks - 1);
    const int64_t n = std::min(kBlock, size_ - start);
    if (n <= 0) break;
    Read(start, n, block.data());
    crc.Update(block.data(), static_cast<size_t>(n) * sizeof(int32_t));
    if (span == 0) break;  // the whole stream was one block
  }
  return crc.hex();
}

absl::StatusOr<std::vector<int32_t>> ReadTokens(const std::string& path, TokenFormat format, int64_t n,
                                                int64_t vocab) {
  MS_ASSIGN_OR_RETURN(std::unique_ptr<TokenStream> stream, TokenStream::Open({path}, /*min_tokens_per_shard=*/0, format));
  if (n > stream->size()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": holds ", stream->size(), " tokens, ", n, " needed"));
  }
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  stream->Read(0, n, tokens.data());
  const int64_t limit = vocab > 0 ? vocab : int64_t{INT32_MAX} + 1;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = static_cast<uint32_t>(tokens[i]);  // a uint32 id past 2^31 - 1 reads as a negative int32
    if (id >= limit) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": token ", i, " is ", id, ", not below ",
          vocab > 0 ? absl::StrCat("the model's vocabulary V = ", vocab) : std::string("2^31")));
    }
  }
  return tokens;
}

absl::StatusOr<std::string> SampledFileFingerprint(const std::string& path, const char* what) {
  int64_t size = 0;
  MS_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path, what, INT64_MAX, &size));
  constexpr int64_t kBlocks = 256, kBlock = 4096;
  Crc32cStream crc;
  crc.Update(&size, sizeof(size));
  std::vector<char> block(kBlock);
  const int64_t span = std::max<int64_t>(0, size - kBlock);  // where the last block starts
  for (int64_t b = 0; b < kBlocks && size > 0; ++b) {
    const int64_t start = span * b / (kBlocks - 1), n = std::min(kBlock, size - start);
    for (int64_t got = 0; got < n;) {
      const ssize_t r = ::pread(fd, block.data() + got, static_cast<size_t>(n - got), start + got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        ::close(fd);
        return absl::DataLossError(absl::StrCat(path, ": read failed (the file shrank?)"));
      }
      got += r;
    }
    crc.Update(block.data(), static_cast<size_t>(n));
    if (span == 0) break;  // the whole file was one block
  }
  ::close(fd);
  return crc.hex();
}

void TokenStream::Read(int64_t start, int64_t n, int32_t* out) const {
  // The shard holding `start`: the last one whose first token is <= start.
  auto it = std::upper_bound(shards_.begin(), shards_.end(), start,
                             [](int64_t v, const Shard& s) { return v < s.first; });
  size_t k = static_cast<size_t>(it - shards_.begin()) - 1;
  while (n > 0) {
    const Shard& s = shards_[k];
    const int64_t at = start - s.first;
    const int64_t take = std::min(n, s.count - at);
    if (s.width == 2) {
      const uint8_t* p = s.tokens + at * 2;
      for (int64_t i = 0; i < take; ++i) {
        uint16_t v;
        std::memcpy(&v, p + i * 2, 2);
        out[i] = v;
      }
    } else {
      std::memcpy(out, s.tokens + at * 4, static_cast<size_t>(take) * 4);
    }
    out += take;
    start += take;
    n -= take;
    ++k;
  }
}

// ---------------------------------------------------------------------------

absl::StatusOr<WindowSampler> WindowSampler::Create(int64_t num_tokens, int64_t seq_len, uint64_t seed) {
  if (seq_len < 1) return absl::InvalidArgumentError(absl::StrCat("seq_len ", seq_len, " (expected >= 1)"));
  if (num_tokens < seq_len + 1) {
    return absl::InvalidArgumentError(absl::StrCat("the token stream holds ", num_tokens,
                                                   " tokens, fewer than one window of seq_len + 1 = ", seq_len + 1));
  }
  WindowSampler s;
  s.num_tokens_ = num_tokens;
  s.seq_len_ = seq_len;
  s.seed_ = seed;
  s.windows_ = std::max<int64_t>(1, num_tokens / seq_len - 1);
  s.slack_ = num_tokens - 1 - s.windows_ * seq_len;
  int bits = 0;
  while ((int64_t{1} << bits) < s.windows_) ++bits;
  s.half_bits_ = std::max(1, (bits + 1) / 2);
  return s;
}

int64_t WindowSampler::EpochOffset(int64_t epoch) const {
  const unsigned __int128 r = static_cast<unsigned __int128>(EpochKey(seed_, epoch)) *
                              static_cast<unsigned __int128>(slack_ + 1);
  return static_cast<int64_t>(r >> 64);
}

int64_t WindowSampler::Permute(int64_t epoch, int64_t j) const {
  if (windows_ == 1) return 0;
  const uint64_t key = EpochKey(seed_, epoch);
  const uint64_t mask = (uint64_t{1} << half_bits_) - 1;
  auto encrypt = [&](uint64_t x) {
    uint64_t left = x >> half_bits_, right = x & mask;
    for (uint64_t round = 0; round < 6; ++round) {
      const uint64_t f = SplitMix64(right ^ SplitMix64(key + round + 1)) & mask;
      const uint64_t next = left ^ f;
      left = right;
      right = next;
    }
    return (left << half_bits_) | right;
  };
  uint64_t y = encrypt(static_cast<uint64_t>(j));
  while (y >= static_cast<uint64_t>(windows_)) y = encrypt(y);  // cycle-walk into [0, W)
  return static_cast<int64_t>(y);
}

int64_t WindowSampler::Start(int64_t sample) const {
  const int64_t epoch = sample / windows_;
  const int64_t j = sample % windows_;
  return EpochOffset(epoch) + Permute(epoch, j) * seq_len_;
}

// ---------------------------------------------------------------------------

uint64_t SourceSeed(uint64_t seed, int k, int num_sources) {
  return num_sources == 1 ? seed : SplitMix64(SplitMix64(seed) + static_cast<uint64_t>(k) + 1);
}

absl::StatusOr<std::unique_ptr<TrainLoader>> TrainLoader::Create(std::shared_ptr<const TokenStream> stream,
                                                                 const LoaderOptions& options) {
  std::vector<LoaderSource> one(1);
  one[0].stream = std::move(stream);
  return Create(std::move(one), options);
}

absl::StatusOr<std::unique_ptr<TrainLoader>> TrainLoader::Create(std::vector<LoaderSource> sources,
                                                                 const LoaderOptions& options) {
  MS_RETURN_IF_ERROR(CheckLayout(options.seq_len, options.global_batch, options.dp_rank, options.dp_size));
  if (options.start_sample < 0) {
    return absl::InvalidArgumentError(absl::StrCat("start sample ", options.start_sample, " (expected >= 0)"));
  }
  if (sources.empty()) return absl::InvalidArgumentError("no training data sources");
  std::vector<double> weights;
  std::vector<std::string> names;
  for (const LoaderSource& s : sources) {
    weights.push_back(s.weight);
    names.push_back(s.name);
  }
  MS_ASSIGN_OR_RETURN(MixtureSchedule schedule, MixtureSchedule::Create(weights, names));
  const int K = static_cast<int>(sources.size());
  std::vector<WindowSampler> samplers;
  for (int k = 0; k < K; ++k) {
    const TokenStream& stream = *sources[k].stream;
    const std::string prefix = K > 1 ? absl::StrCat("data source ", sources[k].name, ": ") : "";
    if (auto s = stream.CheckShardSizes(options.seq_len + 1); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
    }
    auto sampler = WindowSampler::Create(stream.size(), options.seq_len, SourceSeed(options.seed, k, K));
    if (!sampler.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, stream.paths().front(),
                                                     stream.paths().size() > 1 ? " ..." : "", ": ",
                                                     sampler.status().message()));
    }
    samplers.push_back(*sampler);
  }
  return std::unique_ptr<TrainLoader>(
      new TrainLoader(std::move(sources), options, std::move(schedule), std::move(samplers)));
}

std::string TrainLoader::Locate(int64_t sample, int64_t offset) const {
  const MixtureSchedule::Pick pick = schedule_.Source(sample);
  return sources_[pick.source].stream->Locate(samplers_[pick.source].Start(pick.index) + offset);
}

namespace {

// An exception out of Make (std::bad_alloc for a batch too large for the memory left)
// as a Status naming the stream.
absl::Status MakeFailed(const TokenStream& stream, const LoaderOptions& o, const char* what) {
  return absl::ResourceExhaustedError(absl::StrCat(
      stream.paths().front(), stream.paths().size() > 1 ? " ..." : "", ": cannot make a batch of ",
      o.global_batch / o.dp_size, " windows of ", o.seq_len + 1, " tokens (", what, ")"));
}

}  // namespace

TrainLoader::TrainLoader(std::vector<LoaderSource> sources, const LoaderOptions& options, MixtureSchedule schedule,
                         std::vector<WindowSampler> samplers)
    : sources_(std::move(sources)), options_(options), schedule_(std::move(schedule)), samplers_(std::move(samplers)),
      consumed_(options.start_sample),
      next_to_make_(options.start_sample) {
  if (options_.prefetch > 0) thread_ = std::thread([this] { Prefetch(); });
}

TrainLoader::~TrainLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Batch TrainLoader::Make(int64_t batch_start) const {
  const int64_t rows = options_.global_batch / options_.dp_size;
  const int64_t width = options_.seq_len + 1;
  Batch b;
  b.first_sample = batch_start + options_.dp_rank * rows;
  b.rows = rows;
  b.seq_len = options_.seq_len;
  b.tokens.resize(static_cast<size_t>(rows * width));
  for (int64_t r = 0; r < rows; ++r) {
    const MixtureSchedule::Pick pick = schedule_.Source(b.first_sample + r);
    sources_[pick.source].stream->Read(samplers_[pick.source].Start(pick.index), width, b.tokens.data() + r * width);
  }
  return b;
}

void TrainLoader::Prefetch() {
  while (true) {
    int64_t start;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || static_cast<int>(ready_.size()) < options_.prefetch; });
      if (stop_) return;
      start = next_to_make_;
      next_to_make_ += options_.global_batch;
    }
    // Nothing may escape a thread (std::terminate): a failure ends prefetching and
    // Next() reports it on the caller's thread.
    absl::Status failed;
    Batch b;
    try {
      b = Make(start);
    } catch (const std::bad_alloc&) {
      failed = MakeFailed(first_stream(), options_, "out of memory");
    } catch (const std::exception& e) {
      failed = MakeFailed(first_stream(), options_, e.what());
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (failed.ok()) {
        ready_.push_back(std::move(b));
      } else {
        error_ = failed;
      }
    }
    cv_.notify_all();
    if (!failed.ok()) return;
  }
}

absl::StatusOr<Batch> TrainLoader::Next() {
  Batch b;
  if (options_.prefetch <= 0) {
    try {
      b = Make(consumed_);
    } catch (const std::bad_alloc&) {
      return MakeFailed(first_stream(), options_, "out of memory");
    } catch (const std::exception& e) {
      return MakeFailed(first_stream(), options_, e.what());
    }
  } else {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !ready_.empty() || !error_.ok(); });
    if (ready_.empty()) return error_;
    b = std::move(ready_.front());
    ready_.pop_front();
    cv_.notify_all();
  }
  consumed_ += options_.global_batch;
  return b;
}

// ---------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<ValidationLoader>> ValidationLoader::Create(std::shared_ptr<const TokenStream> stream,
                                                                           const ValidationOptions& options) {
  const int dp = options.dp_size;
  MS_RETURN_IF_ERROR(CheckLayout(options.seq_len, options.micro_batch * dp, options.dp_rank, dp));
  if (options.windows < 0) {
    return absl::InvalidArgumentError(absl::StrCat("validation windows ", options.windows, " (expected >= 0)"));
  }
  MS_RETURN_IF_ERROR(stream->CheckShardSizes(options.seq_len + 1));
  const std::string shards = absl::StrCat(stream->paths().front(), stream->paths().size() > 1 ? " ..." : "");
  const int64_t held = (stream->size() - 1) / options.seq_len;
  if (options.exact && (options.windows == 0 || options.windows % dp != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("eval.windows = ", options.windows, " is not a positive multiple of dp = ", dp,
                     " (each replica takes an equal block of the held-out windows)"));
  }
  if (options.exact && options.windows > held) {
    return absl::InvalidArgumentError(absl::StrCat(shards, ": ", stream->size(), " tokens make ", held,
                                                   " validation windows of seq_len + 1 = ", options.seq_len + 1,
                                                   ", fewer than eval.windows = ", options.windows));
  }
  const int64_t want = options.windows > 0 ? std::min(options.windows, held) : held;
  const int64_t windows = want / dp * dp;
  if (windows == 0) {
    return absl::InvalidArgumentError(absl::StrCat(shards, ": ", stream->size(), " tokens make ", held,
                                                   " validation windows of seq_len + 1 = ", options.seq_len + 1,
                                                   ", fewer than one per data-parallel replica (dp = ", dp, ")"));
  }
  return std::unique_ptr<ValidationLoader>(new ValidationLoader(std::move(stream), options, windows));
}

Batch ValidationLoader::Get(int64_t b) const {
  const int64_t first = b * options_.micro_batch;
  const int64_t rows = std::min(options_.micro_batch, per_replica_ - first);
  const int64_t width = options_.seq_len + 1;
  Batch out;
  out.first_sample = options_.dp_rank * per_replica_ + first;
  out.rows = rows;
  out.seq_len = options_.seq_len;
  out.tokens.resize(static_cast<size_t>(rows * width));
  for (int64_t r = 0; r < rows; ++r) {
    stream_->Read((out.first_sample + r) * options_.seq_len, width, out.tokens.data() + r * width);
  }
  return out;
}

bool ValidationLoader::Next(Batch* batch) {
  if (next_ >= num_batches_) return false;
  *batch = Get(next_++);
  return true;
}

}  // namespace multiscreen
