// common/text_file.h: a small file is replaced whole, and writers of one path at once each
// succeed (two `sweep run`s on a finished sweep both rewrote sweep.json through one
// `.tmp` name, and one rename found the other's temporary gone: issue 31, "Smaller"); a
// write that fails names its cause and leaves the old file and no temporary.
#include "common/text_file.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace multiscreen {
namespace {

namespace fs = std::filesystem;

std::string Read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(WriteTextFileTest, ConcurrentWritersOfOnePathEachSucceedAndLeaveOneWholeFile) {
  const fs::path dir = fs::path(::testing::TempDir()) / "text_file_concurrent";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path path = dir / "sweep.json";
  std::vector<std::thread> writers;
  std::vector<int> failures(4, 0);
  for (int w = 0; w < 4; ++w) {
    writers.emplace_back([&, w] {
      const std::string text = std::string(4096, char('a' + w)) + "\n";
      for (int i = 0; i < 200; ++i) failures[w] += !WriteTextFile(path.string(), text).ok();
    });
  }
  for (std::thread& t : writers) t.join();
  for (int w = 0; w < 4; ++w) EXPECT_EQ(failures[w], 0) << "writer " << w;
  const std::string text = Read(path);
  ASSERT_EQ(text.size(), 4097u);
  EXPECT_EQ(text, std::string(4096, text[0]) + "\n");  // one writer's text, whole
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1) << "temporaries left behind";
}

TEST(WriteTextFileTest, ADirectoryInThePlaceOfTheFileIsRefusedNamingIt) {
  const fs::path dir = fs::path(::testing::TempDir()) / "text_file_dir";
  fs::remove_all(dir);
  fs::create_directories(dir / "out.json");
  const absl::Status s = WriteTextFile((dir / "out.json").string(), "{}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find((dir / "out.json").string()), std::string::npos) << s;
  EXPECT_TRUE(fs::is_directory(dir / "out.json"));
}

TEST(WriteTextFileTest, AWriteThatFailsNamesItsCauseAndLeavesTheOldFileAndNoTemporary) {
  const fs::path dir = fs::path(::testing::TempDir()) / "text_file_full";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path path = dir / "run.json";
  ASSERT_TRUE(WriteTextFile(path.string(), "{\"old\": 1}\n").ok());
  // A file-size limit below the text: the write fails with EFBIG (SIGXFSZ ignored), as a
  // full disk fails with ENOSPC.
  struct rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = saved;
  small.rlim_cur = 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const absl::Status s = WriteTextFile(path.string(), std::string(1 << 20, 'x'));
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path.string() + ".tmp."), std::string::npos) << s;
  EXPECT_NE(s.message().find(": write failed: File too large"), std::string::npos) << s;
  EXPECT_EQ(Read(path), "{\"old\": 1}\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1) << "a temporary left behind";
}

}  // namespace
}  // namespace multiscreen
