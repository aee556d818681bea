// launch/text_file.h: a small file is replaced whole, and writers of one path at once each
// succeed (two `sweep run`s on a finished sweep both rewrote sweep.json through one
// `.tmp` name, and one rename found the other's temporary gone: issue 31, "Smaller").
#include "launch/text_file.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace multiscreen
