#include "common/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace multiscreen {
namespace {

bool NoFlockHere(int err) { return err == ENOSYS || err == EOPNOTSUPP || err == ENOLCK; }

// Whether `path` names the file open as `fd` (not unlinked, not replaced).
bool NamesFile(const std::string& path, int fd) {
  struct stat by_path, by_fd;
  return ::stat(path.c_str(), &by_path) == 0 && ::fstat(fd, &by_fd) == 0 && by_path.st_dev == by_fd.st_dev &&
         by_path.st_ino == by_fd.st_ino;
}

// Opens `path` and locks it with `operation` (LOCK_EX | LOCK_NB or LOCK_SH), until the
// lock is had on the file `path` still names (one unlinked by its last holder between
// our open and our lock is opened again). `*supported` is false where the file system
// has no flock (the descriptor is returned unlocked). Errors as FileLock::Acquire's.
absl::StatusOr<int> OpenLocked(const std::string& path, int operation, const std::string& holder, bool* supported) {
  for (;;) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return absl::PermissionDeniedError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
    int rc;
    do rc = ::flock(fd, operation);
    while (rc != 0 && errno == EINTR);
    const int err = errno;
    if (rc != 0 && NoFlockHere(err)) {
      *supported = false;
      return fd;
    }
    if (rc != 0) {
      ::close(fd);
      if (err == EWOULDBLOCK) {
        return absl::FailedPreconditionError(absl::StrCat("another ", holder, " is using it (", path, " is locked)"));
      }
      return absl::InternalError(absl::StrCat("cannot lock ", path, ": ", std::strerror(err)));
    }
    if (NamesFile(path, fd)) {
      *supported = true;
      return fd;
    }
    ::close(fd);
  }
}

}  // namespace

absl::StatusOr<FileLock> FileLock::Acquire(const std::string& path, const std::string& holder, OnRelease on_release) {
  bool supported = true;
  auto fd = OpenLocked(path, LOCK_EX | LOCK_NB, holder, &supported);
  if (!fd.ok()) return fd.status();
  return FileLock(*fd, path, supported, on_release);
}

absl::StatusOr<FileLock> FileLock::AcquireShared(const std::string& path) {
  bool supported = true;
  auto fd = OpenLocked(path, LOCK_SH, "reader", &supported);
  if (!fd.ok()) return fd.status();
  FileLock lock(*fd, path, supported, OnRelease::kKeepFile);
  lock.remove_if_last_ = supported;
  return lock;
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
      on_release_(other.on_release_),
      remove_if_last_(other.remove_if_last_) {}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    supported_ = other.supported_;
    on_release_ = other.on_release_;
    remove_if_last_ = other.remove_if_last_;
  }
  return *this;
}

void FileLock::Release() {
  if (fd_ < 0) return;
  if (on_release_ == OnRelease::kRemoveFile) ::unlink(path_.c_str());  // still locked here
  // A shared holder removes the file when it alone holds it (the conversion to exclusive
  // may let another in first: then it fails and the file stays theirs).
  if (remove_if_last_ && ::flock(fd_, LOCK_EX | LOCK_NB) == 0 && NamesFile(path_, fd_)) ::unlink(path_.c_str());
  ::close(fd_);  // releases the lock
  fd_ = -1;
}

FileLock::~FileLock() { Release(); }

}  // namespace multiscreen
