#include "trainer/tensorboard_writer.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "checkpoint/h5_file.h"
#include "trainer/tensorboard.pb.h"

namespace multiscreen {
namespace {

double WallTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t MaskedCrc32c(const void* data, size_t size) {
  const uint32_t crc = Crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(dir, ": cannot create directory: ", ec.message()));
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const std::string path = absl::StrCat(dir, "/events.out.tfevents.", static_cast<int64_t>(WallTime()), ".", host);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot create event file"));
  std::unique_ptr<TensorBoardWriter> w(new TensorBoardWriter(path, f));
  tensorboard::Event event;
  event.set_wall_time(WallTime());
  event.set_file_version("brain.Event:2");
  if (auto s = w->WriteRecord(event.SerializeAsString()); !s.ok()) return s;
  return w;
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status TensorBoardWriter::WriteRecord(const std::string& data) {
  const uint64_t length = data.size();
  const uint32_t length_crc = MaskedCrc32c(&length, sizeof(length));
  const uint32_t data_crc = MaskedCrc32c(data.data(), data.size());
  errno = 0;
  const bool ok = std::fwrite(&length, sizeof(length), 1, file_) == 1 &&
                  std::fwrite(&length_crc, sizeof(length_crc), 1, file_) == 1 &&
                  std::fwrite(data.data(), 1, data.size(), file_) == data.size() &&
                  std::fwrite(&data_crc, sizeof(data_crc), 1, file_) == 1;
  if (!ok) return WriteError(path_, "write failed", errno);
  return absl::OkStatus();
}

absl::Status TensorBoardWriter::AddScalar(const std::string& tag, double value, int64_t step) {
  tensorboard::Event event;
  event.set_wall_time(WallTime());
  event.set_step(step);
  auto* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  return WriteRecord(event.SerializeAsString());
}

absl::Status TensorBoardWriter::Flush() {
  if (std::fflush(file_) != 0) return WriteError(path_, "flush failed", errno);
  return absl::OkStatus();
}

}  // namespace multiscreen
