// TensorBoard event files: CRC-32C, TFRecord framing, and Event messages read back.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "trainer/tensorboard.pb.h"
#include "trainer/tensorboard_writer.h"

namespace multiscreen {
namespace {

TEST(TensorBoardTest, Crc32cMatchesTheStandardCheckValue) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);  // the CRC-32C check value (RFC 3720)
}

TEST(TensorBoardTest, RecordsFrameEventsWithValidChecksums) {
  const std::string dir = (std::filesystem::temp_directory_path() / "ms_tb_test").string();
  std::filesystem::remove_all(dir);
  std::string path;
  {
    auto w = TensorBoardWriter::Open(dir);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->AddScalar("train/loss", 3.25, 7).ok());
    ASSERT_TRUE((*w)->AddScalar("train/lr", 0.0625, 8).ok());
    ASSERT_TRUE((*w)->Flush().ok());
    path = (*w)->path();
  }
  std::ifstream in(path, std::ios::binary);
  std::vector<tensorboard::Event> events;
  while (true) {
    uint64_t length;
    uint32_t length_crc, data_crc;
    if (!in.read(reinterpret_cast<char*>(&length), 8)) break;
    ASSERT_TRUE(in.read(reinterpret_cast<char*>(&length_crc), 4));
    EXPECT_EQ(length_crc, MaskedCrc32c(&length, 8));
    std::string data(length, '\0');
    ASSERT_TRUE(in.read(data.data(), length));
    ASSERT_TRUE(in.read(reinterpret_cast<char*>(&data_crc), 4));
    EXPECT_EQ(data_crc, MaskedCrc32c(data.data(), data.size()));
    events.emplace_back();
    ASSERT_TRUE(events.back().ParseFromString(data));
  }
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_EQ(events[1].step(), 7);
  EXPECT_EQ(events[1].summary().value(0).tag(), "train/loss");
  EXPECT_FLOAT_EQ(events[1].summary().value(0).simple_value(), 3.25f);
  EXPECT_EQ(events[2].step(), 8);
}

}  // namespace
}  // namespace multiscreen
