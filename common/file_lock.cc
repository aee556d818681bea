#include "common/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace multiscreen {
namespace {

bool NoFlockHere(int err) { return err == ENOSYS || err == EOPNOTSUPP || err == ENOLCK; }

}  // namespace

absl::StatusOr<FileLock> FileLock::Acquire(const std::string& path, const std::string& holder, OnRelease on_release) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return absl::PermissionDeniedError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return FileLock(fd, path, true, on_release);
  const int err = errno;
  if (NoFlockHere(err)) return FileLock(fd, path, false, on_release);
  ::close(fd);
  if (err == EWOULDBLOCK) {
    return absl::FailedPreconditionError(absl::StrCat("another ", holder, " is using it (", path, " is locked)"));
  }
  return absl::InternalError(absl::StrCat("cannot lock ", path, ": ", std::strerror(err)));
}

bool FileLock::Held(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return held;
}

FileLock::FileLock(FileLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      supported_(other.supported_),
      on_release_(other.on_release_) {}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    supported_ = other.supported_;
    on_release_ = other.on_release_;
  }
  return *this;
}

void FileLock::Release() {
  if (fd_ < 0) return;
  if (on_release_ == OnRelease::kRemoveFile) ::unlink(path_.c_str());  // still locked here
  ::close(fd_);  // releases the lock
  fd_ = -1;
}

FileLock::~FileLock() { Release(); }

}  // namespace multiscreen
