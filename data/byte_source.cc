// The bytes of an input file, decompressed as prepare reads them (data/byte_source.h).
#include "data/byte_source.h"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace multiscreen {
namespace {

namespace fs = std::filesystem;

const char* FormatName(Compression c) { return c == Compression::kGzip ? "gzip" : "zstd"; }
const char* MagicHex(Compression c) { return c == Compression::kGzip ? "1f 8b" : "28 b5 2f fd"; }
std::string Suffix(Compression c) { return c == Compression::kGzip ? ".gz" : ".zst"; }

// Reads a file descriptor. A pipe, FIFO or character device is opened non-blocking and
// waited on with poll() in 200 ms slices, checking `cancelled` between them, so that an
// interrupt stops a read that has no data coming (a FIFO with no writer yet): on Linux
// poll() reports no hang-up on a FIFO before its first writer, so "no writer yet" waits
// and "the writer closed" is the end.
class FdReader {
 public:
  FdReader(std::string path, int fd, std::function<bool()> cancelled)
      : path_(std::move(path)), fd_(fd), cancelled_(std::move(cancelled)) {}
  ~FdReader() { ::close(fd_); }
  FdReader(const FdReader&) = delete;
  FdReader& operator=(const FdReader&) = delete;

  absl::StatusOr<size_t> Read(char* buf, size_t cap) {
    while (true) {
      if (cancelled_ && cancelled_()) return absl::CancelledError(absl::StrCat(path_, ": interrupted while reading"));
      pollfd p{fd_, POLLIN, 0};
      const int ready = ::poll(&p, 1, 200);
      if (ready < 0 && errno != EINTR) return absl::DataLossError(absl::StrCat(path_, ": poll failed: ", std::strerror(errno)));
      if (ready <= 0) continue;
      const ssize_t n = ::read(fd_, buf, cap);
      if (n >= 0) return static_cast<size_t>(n);
      if (errno == EINTR || errno == EAGAIN) continue;
      return absl::DataLossError(absl::StrCat(path_, ": read failed: ", std::strerror(errno)));
    }
  }

 private:
  std::string path_;
  int fd_;
  std::function<bool()> cancelled_;
};

// Opens `path` for FdReader: non-blocking when it is not a regular file (opening a FIFO
// blocks until a writer comes otherwise).
absl::StatusOr<int> OpenFd(const std::string& path) {
  struct stat st {};
  const bool regular = ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (regular ? 0 : O_NONBLOCK));
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  return fd;
}

// The first bytes of a regular file opened as `fd` (empty for a pipe: not peeked at).
std::string RegularFileHead(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return "";
  char head[4] = {};
  const ssize_t n = ::pread(fd, head, sizeof(head), 0);
  return n > 0 ? std::string(head, static_cast<size_t>(n)) : "";
}

class FileSource : public ByteSource {
 public:
  FileSource(std::string path, int fd, std::function<bool()> cancelled) : reader_(std::move(path), fd, std::move(cancelled)) {}
  absl::StatusOr<size_t> Read(char* buf, size_t cap) override { return reader_.Read(buf, cap); }

 private:
  FdReader reader_;
};

class GzipSource : public ByteSource {
 public:
  GzipSource(std::string path, gzFile f) : path_(std::move(path)), f_(f) { gzbuffer(f_, 1 << 17); }
  ~GzipSource() override { gzclose(f_); }
  absl::StatusOr<size_t> Read(char* buf, size_t cap) override {
    const int n = gzread(f_, buf, static_cast<unsigned>(std::min<size_t>(cap, 1 << 30)));
    int err = Z_OK;
    const char* message = gzerror(f_, &err);
    if (n < 0 || (err != Z_OK && err != Z_STREAM_END)) {
      return absl::DataLossError(absl::StrCat(path_, ": corrupt gzip data (", message, ")"));
    }
    if (n > 0 && !checked_) {
      checked_ = true;
      if (gzdirect(f_)) return absl::InvalidArgumentError(absl::StrCat(path_, ": not gzip data"));
    }
    return static_cast<size_t>(n);
  }

 private:
  std::string path_;
  gzFile f_;
  bool checked_ = false;
};

class ZstdSource : public ByteSource {
 public:
  ZstdSource(std::string path, int fd, std::function<bool()> cancelled)
      : path_(path), reader_(std::move(path), fd, std::move(cancelled)), in_(ZSTD_DStreamInSize()) {
    stream_ = ZSTD_createDStream();
    ZSTD_initDStream(stream_);
  }
  ~ZstdSource() override {
    ZSTD_freeDStream(stream_);
  }
  absl::StatusOr<size_t> Read(char* buf, size_t cap) override {
    ZSTD_outBuffer out = {buf, cap, 0};
    while (out.pos == 0) {
      if (input_.pos == input_.size) {
        MS_ASSIGN_OR_RETURN(const size_t n, reader_.Read(in_.data(), in_.size()));
        if (n == 0) {
          if (!frame_done_) return absl::DataLossError(absl::StrCat(path_, ": truncated zstd data"));
          return size_t{0};
        }
        input_ = {in_.data(), n, 0};
      }
      const size_t rc = ZSTD_decompressStream(stream_, &out, &input_);
      if (ZSTD_isError(rc)) {
        return absl::DataLossError(absl::StrCat(path_, ": corrupt zstd data (", ZSTD_getErrorName(rc), ")"));
      }
      frame_done_ = rc == 0;
    }
    return out.pos;
  }

 private:
  std::string path_;
  FdReader reader_;
  ZSTD_DStream* stream_ = nullptr;
  std::vector<char> in_;
  ZSTD_inBuffer input_ = {nullptr, 0, 0};
  bool frame_done_ = true;
};

}  // namespace

Compression MagicCompression(std::string_view head) {
  if (head.substr(0, 2) == "\x1f\x8b") return Compression::kGzip;
  if (head.substr(0, 4) == "\x28\xb5\x2f\xfd") return Compression::kZstd;
  if (head.size() >= 4 && (static_cast<unsigned char>(head[0]) & 0xf0) == 0x50 && head.substr(1, 3) == "\x2a\x4d\x18") {
    return Compression::kZstd;
  }
  return Compression::kNone;
}

Compression FileMagicCompression(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[4] = {};
  in.read(head, sizeof head);
  return MagicCompression(std::string_view(head, static_cast<size_t>(in.gcount())));
}

absl::Status CompressedTokenDataError(const std::string& path, Compression held) {
  if (held == Compression::kNone) return absl::OkStatus();
  // A name with the suffix decompresses beside itself; one without it must be given a new name.
  const std::string how = NamedCompression(path) == held
                              ? absl::StrCat(held == Compression::kGzip ? "gunzip -k " : "zstd -d ", path)
                              : absl::StrCat(held == Compression::kGzip ? "zcat " : "zstdcat ", path, " > NEW",
                                             fs::path(path).has_extension() ? fs::path(path).extension().string()
                                                                            : std::string(".bin"));
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", FormatName(held), " data (magic ", MagicHex(held),
                                                 "): token files are read as they are stored; decompress it first (",
                                                 how, ")"));
}

absl::StatusOr<std::unique_ptr<ByteSource>> OpenByteSource(const std::string& path, std::function<bool()> cancelled) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return absl::NotFoundError(absl::StrCat(path, ": no such input file"));
  if (fs::is_directory(path, ec)) return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory"));
  MS_ASSIGN_OR_RETURN(const int fd, OpenFd(path));
  if (absl::Status named = CheckCompressedName(path, RegularFileHead(fd)); !named.ok()) {
    ::close(fd);
    return named;
  }
  switch (NamedCompression(path)) {
    case Compression::kGzip: {
      ::close(fd);  // zlib opens the file itself (blocking, as a FIFO's reader must be)
      gzFile f = gzopen(path.c_str(), "rb");
      if (f == nullptr) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
      return std::unique_ptr<ByteSource>(new GzipSource(path, f));
    }
    case Compression::kZstd:
      return std::unique_ptr<ByteSource>(new ZstdSource(path, fd, cancelled));
    case Compression::kNone:
      break;
  }
  return std::unique_ptr<ByteSource>(new FileSource(path, fd, cancelled));
}

absl::Status CheckCompressedName(const std::string& path, std::string_view head) {
  const Compression named = NamedCompression(path);
  const Compression held = MagicCompression(head);
  if (named == held) return absl::OkStatus();
  std::error_code ec;
  const bool regular = fs::is_regular_file(path, ec);
  if (held == Compression::kNone) {
    // Only a regular file's head is looked at before reading (a pipe's bytes are read
    // once); the readers name a pipe's data that is not what its name says.
    if (!regular || head.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(path, ": not ", FormatName(named), " data (no magic ",
                                                   MagicHex(named), " at its start)"));
  }
  const std::string what = absl::StrCat(path, ": ", FormatName(held), " data (magic ", MagicHex(held), ")");
  if (!regular) {
    return absl::InvalidArgumentError(absl::StrCat(what, " read from a pipe: decompress it before the pipe (",
                                                   held == Compression::kGzip ? "zcat" : "zstdcat",
                                                   "), or pass the compressed file itself"));
  }
  const std::string advice = absl::StrCat(": name it ", WithoutCompressionSuffix(path), Suffix(held), " to have it decompressed");
  if (named == Compression::kNone) return absl::InvalidArgumentError(absl::StrCat(what, " under a name without ", Suffix(held), advice));
  return absl::InvalidArgumentError(absl::StrCat(what, " under a ", Suffix(named), " name", advice));
}

Compression NamedCompression(const std::string& path) {
  if (absl::EndsWithIgnoreCase(path, ".gz")) return Compression::kGzip;
  if (absl::EndsWithIgnoreCase(path, ".zst")) return Compression::kZstd;
  return Compression::kNone;
}

bool IsCompressedName(const std::string& path) { return NamedCompression(path) != Compression::kNone; }

std::string WithoutCompressionSuffix(const std::string& path) {
  const Compression named = NamedCompression(path);
  return named == Compression::kNone ? path : path.substr(0, path.size() - Suffix(named).size());
}

absl::StatusOr<LineReader> LineReader::Open(const std::string& path, int64_t max_line_bytes) {
  LineReader r;
  MS_ASSIGN_OR_RETURN(r.source_, OpenByteSource(path));
  r.path_ = path;
  r.buf_.resize(1 << 16);
  r.max_line_bytes_ = max_line_bytes;
  return r;
}

absl::StatusOr<bool> LineReader::Next(std::string* line) {
  line->clear();
  if (done_) return false;
  while (true) {
    if (pos_ == end_) {
      MS_ASSIGN_OR_RETURN(const size_t n, source_->Read(buf_.data(), buf_.size()));
      pos_ = 0;
      end_ = n;
      if (n == 0) {
        done_ = true;
        if (line->empty()) return false;
        ++line_;
        return true;
      }
    }
    const char* begin = buf_.data() + pos_;
    const char* nl = static_cast<const char*>(std::memchr(begin, '\n', end_ - pos_));
    const size_t take = nl ? static_cast<size_t>(nl - begin) : end_ - pos_;
    line->append(begin, take);
    pos_ += take + (nl ? 1 : 0);
    if (static_cast<int64_t>(line->size()) > max_line_bytes_) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ":", line_ + 1, ": a line longer than ", max_line_bytes_,
                                                     " bytes (not a text file?)"));
    }
    if (nl) {
      ++line_;
      return true;
    }
  }
}

}  // namespace multiscreen
