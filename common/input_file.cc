#include "common/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace multiscreen {
namespace {

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

std::string ByteSize(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30)) return absl::StrFormat("%.1f GiB", double(bytes) / double(1 << 30));
  if (bytes >= (int64_t{1} << 20)) return absl::StrFormat("%.0f MiB", double(bytes) / double(1 << 20));
  return absl::StrCat(bytes, " bytes");
}

absl::StatusOr<int> OpenRegularFile(const std::string& path, const char* what, int64_t max_bytes,
                                    int64_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int e = errno;
    const std::string why = absl::StrCat(path, ": cannot open ", what, " (", std::strerror(e), ")");
    if (e == ENOENT || e == ENOTDIR) return absl::NotFoundError(why);
    if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(why);
    return absl::InvalidArgumentError(why);
  }
  struct stat st = {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot stat ", what, " (", std::strerror(e), ")"));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is ", KindOf(st.st_mode), ", not a regular file (expected a ", what, ")"));
  }
  if (st.st_size > max_bytes) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", ByteSize(st.st_size), ", more than the ",
                                                   ByteSize(max_bytes), " a ", what, " may be"));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  *size = static_cast<int64_t>(st.st_size);
  return fd;
}

absl::Status CheckRegularInput(const std::string& path) {
  struct stat st = {};
  if (::stat(path.c_str(), &st) != 0) {
    const int e = errno;
    const std::string why = absl::StrCat(path, ": ", std::strerror(e));
    return e == ENOENT || e == ENOTDIR ? absl::NotFoundError(why) : absl::InvalidArgumentError(why);
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is ", KindOf(st.st_mode), ", not a regular file"));
  }
  return absl::OkStatus();
}

absl::Status CheckReplaceableOutput(const std::string& flag, const std::string& path) {
  struct stat st = {};
  if (::lstat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(flag.empty() ? "" : flag + "=", path, ": is ", KindOf(st.st_mode),
                                                 ", not a regular file: an output is written beside it and renamed "
                                                 "into place, which would replace it; choose a file path"));
}

absl::Status CreateOutputDirectory(const std::string& flag, const std::string& path) {
  const std::string named = flag.empty() ? path : absl::StrCat(flag, "=", path);
  // The nearest of `path` and its parents that exists must be a directory; the rest are made
  // one at a time, so that the error names the directory that could not be made and why.
  std::vector<std::string> missing;
  std::string dir = path;
  while (!dir.empty()) {
    struct stat st = {};
    if (::stat(dir.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) break;
      const char* kind = S_ISREG(st.st_mode) ? "a file" : KindOf(st.st_mode);
      return absl::InvalidArgumentError(dir == path ? absl::StrCat(named, ": is ", kind, ", not a directory")
                                                    : absl::StrCat(named, ": ", dir, " is ", kind, ", not a directory"));
    }
    if (errno != ENOENT && errno != ENOTDIR) {  // ENOTDIR: a parent is a file, found further up
      return absl::PermissionDeniedError(absl::StrCat(named, ": cannot reach ", dir, ": ", std::strerror(errno)));
    }
    missing.push_back(dir);
    const size_t slash = dir.find_last_not_of('/') == std::string::npos ? std::string::npos
                                                                          : dir.rfind('/', dir.find_last_not_of('/'));
    if (slash == std::string::npos) break;  // a relative name: its parent is the working directory
    dir = dir.substr(0, slash == 0 ? 1 : slash);
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0777) != 0 && errno != EEXIST) {
      return absl::PermissionDeniedError(absl::StrCat(named, ": cannot create ", *it, ": ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, const char* what, int64_t max_bytes) {
  int64_t size = 0;
  auto fd = OpenRegularFile(path, what, max_bytes, &size);
  if (!fd.ok()) return fd.status();
  std::string data(static_cast<size_t>(size), '\0');
  int64_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(*fd, data.data() + got, static_cast<size_t>(size - got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(*fd);
      return absl::DataLossError(absl::StrCat(path, ": read failed (", std::strerror(e), ")"));
    }
    if (n == 0) break;  // shrank since fstat: what is there is the file
    got += n;
  }
  ::close(*fd);
  data.resize(static_cast<size_t>(got));
  return data;
}

}  // namespace multiscreen
