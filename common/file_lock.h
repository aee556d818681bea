// One process at a time in a directory (a run directory, a `prepare` output directory):
// an exclusive advisory lock (flock(2)) on a file inside it, held for the FileLock's
// lifetime and released by the kernel however the process ends (even SIGKILL).
//
// File systems without flock (Lustre mounted without -o flock, some NFS set-ups) make
// flock fail with ENOSYS/EOPNOTSUPP/ENOLCK: there the lock cannot be had, nothing is
// wrong with the directory, and refusing would make the directory unusable. Such a lock
// is "unsupported": Acquire succeeds, `supported()` is false, and the caller says once
// that a second process would not be stopped.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace multiscreen {

class FileLock {
 public:
  // Opens (creating, mode 0644, close-on-exec) `path` and takes an exclusive lock without
  // waiting. `holder` names what holds such locks in the error, e.g. "train process".
  // Errors: PermissionDenied when the file cannot be opened or created (a read-only
  // directory); FailedPrecondition "another <holder> is using it" when a live process holds
  // it; Internal for any other flock error (with strerror's text).
  //
  // `remove`: kRemoveFile unlinks the file when the lock is released (before the descriptor
  // is closed, so still under the lock), for directories that should hold nothing of ours
  // afterwards (`prepare`'s output). A lock is only had on the file that `path` names when
  // it is granted: one granted on a file unlinked meanwhile is dropped and the file opened
  // again, so that a removed lock file never lets two holders in.
  enum class OnRelease { kKeepFile, kRemoveFile };
  static absl::StatusOr<FileLock> Acquire(const std::string& path, const std::string& holder,
                                          OnRelease on_release = OnRelease::kKeepFile);

  // Opens (creating, mode 0644, close-on-exec) `path` and takes a shared lock, waiting
  // while an exclusive holder has it: readers share it, and an exclusive Acquire by
  // another process fails while any reader holds it (a checkpoint's readers against the
  // run's pruning, checkpoint/checkpoint.h ReaderLockPath). The last holder to release it
  // removes the file (when it can have it exclusively at that moment). Errors as
  // Acquire's (no FailedPrecondition: it waits); no flock on the file system: as Acquire.
  static absl::StatusOr<FileLock> AcquireShared(const std::string& path);

  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();

  // False where the file system has no flock (the lock is not held; see above).
  bool supported() const { return supported_; }
  const std::string& path() const { return path_; }
  // The open lock file (close-on-exec): a child that must keep the lock after exec holds a dup.
  int fd() const { return fd_; }

  // Whether some process holds an exclusive lock on `path` now (false when the file does
  // not exist or the file system has no flock). For observers such as `sweep status`.
  static bool Held(const std::string& path);

 private:
  FileLock(int fd, std::string path, bool supported, OnRelease on_release)
      : fd_(fd), path_(std::move(path)), supported_(supported), on_release_(on_release) {}
  void Release();
  int fd_ = -1;
  std::string path_;
  bool supported_ = true;
  OnRelease on_release_ = OnRelease::kKeepFile;
  bool remove_if_last_ = false;  // AcquireShared's
};

}  // namespace multiscreen
