// common/file_lock.h: one holder at a time, released with the object, observable by
// others; a directory that cannot hold the lock file is an error; and where flock fails
// with ENOSYS (ctest runs FileLockTest.* once more under tests/checkpoint/no_flock.c, as
// on Lustre without -o flock) the lock is granted unsupported instead of refused.
#include "common/file_lock.h"

#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace multiscreen {
namespace {

namespace fs = std::filesystem;

// Whether flock works on this file system in this process (false under the shim).
bool FlockWorks(const fs::path& dir) {
  const std::string probe = (dir / "probe").string();
  const int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  const bool works = fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  if (fd >= 0) ::close(fd);
  return works;
}

class FileLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ms_file_lock_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    fs::permissions(dir_, fs::perms::owner_all);
    fs::remove_all(dir_);
  }
  fs::path dir_;
};

TEST_F(FileLockTest, OneHolderAtATimeReleasedWithTheObject) {
  const std::string path = (dir_ / ".lock").string();
  if (!FlockWorks(dir_)) {
    // No flock here: every acquisition is granted, unsupported, and nothing reads as held.
    auto a = FileLock::Acquire(path, "train process");
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_FALSE(a->supported());
    auto b = FileLock::Acquire(path, "train process");
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_FALSE(b->supported());
    EXPECT_FALSE(FileLock::Held(path));
    return;
  }
  EXPECT_FALSE(FileLock::Held(path));  // no file yet
  {
    auto a = FileLock::Acquire(path, "train process");
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_TRUE(a->supported());
    EXPECT_TRUE(FileLock::Held(path));
    // A second open file description conflicts even inside this process (flock semantics).
    auto b = FileLock::Acquire(path, "train process");
    ASSERT_FALSE(b.ok());
    EXPECT_TRUE(absl::IsFailedPrecondition(b.status()));
    EXPECT_EQ(b.status().message(), "another train process is using it (" + path + " is locked)");
    // Moving keeps the one lock held.
    FileLock moved = *std::move(a);
    EXPECT_TRUE(FileLock::Held(path));
    EXPECT_GE(moved.fd(), 0);
  }
  EXPECT_FALSE(FileLock::Held(path));
  auto again = FileLock::Acquire(path, "train process");
  EXPECT_TRUE(again.ok()) << again.status();
}

TEST_F(FileLockTest, ALockThatRemovesItsFileLeavesNothingBehind) {
  const std::string path = (dir_ / ".prepare.lock").string();
  {
    auto a = FileLock::Acquire(path, "prepare", FileLock::OnRelease::kRemoveFile);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_TRUE(fs::exists(path));
    FileLock moved = *std::move(a);  // the moved-from object releases nothing
    EXPECT_TRUE(fs::exists(path));
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(FileLockTest, SharedHoldersKeepOutAnExclusiveOneAndTheLastRemovesTheFile) {
  // A checkpoint's readers (shared) against the run's pruning (exclusive, no wait).
  const std::string path = (dir_ / ".reading-step_00000010").string();
  auto first = FileLock::AcquireShared(path);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = FileLock::AcquireShared(path);
  ASSERT_TRUE(second.ok()) << second.status();
  auto pruner = FileLock::Acquire(path, "reader", FileLock::OnRelease::kRemoveFile);
  EXPECT_TRUE(absl::IsFailedPrecondition(pruner.status())) << pruner.status();
  first = absl::CancelledError("released");
  EXPECT_TRUE(fs::exists(path));  // the second still holds it
  pruner = FileLock::Acquire(path, "reader", FileLock::OnRelease::kRemoveFile);
  EXPECT_TRUE(absl::IsFailedPrecondition(pruner.status())) << pruner.status();
  second = absl::CancelledError("released");
  EXPECT_FALSE(fs::exists(path));  // the last reader took its file with it
  // Once no reader holds it, the pruner has it, and removes it in turn.
  auto reader = FileLock::AcquireShared(path);
  ASSERT_TRUE(reader.ok());
  reader = absl::CancelledError("released");
  pruner = FileLock::Acquire(path, "reader", FileLock::OnRelease::kRemoveFile);
  ASSERT_TRUE(pruner.ok()) << pruner.status();
  pruner = absl::CancelledError("released");
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(FileLockTest, ADirectoryThatCannotHoldTheLockFileIsAnError) {
  if (::geteuid() == 0) GTEST_SKIP() << "root opens read-only directories";
  fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec);
  auto lock = FileLock::Acquire((dir_ / ".lock").string(), "prepare");
  ASSERT_FALSE(lock.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(lock.status()));
  EXPECT_NE(lock.status().message().find("cannot open " + (dir_ / ".lock").string()), std::string::npos);
}

TEST_F(FileLockTest, AMissingDirectoryIsAnError) {
  auto lock = FileLock::Acquire((dir_ / "no" / ".lock").string(), "prepare");
  ASSERT_FALSE(lock.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(lock.status()));
}

}  // namespace
}  // namespace multiscreen
