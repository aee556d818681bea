// TensorBoard event files: TFRecord framing (uint64 length, masked CRC-32C of
// the length, the serialized Event, masked CRC-32C of the data) around Event
// messages (trainer/tensorboard.proto). Written under <run_dir>/tb/.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/crc32c.h"

namespace multiscreen {

// TFRecord's mask of the CRC-32C of `size` bytes.
uint32_t MaskedCrc32c(const void* data, size_t size);

class TensorBoardWriter {
 public:
  // Creates `dir` and a new file events.out.tfevents.<seconds>.<host> in it,
  // starting with the file_version record.
  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> Open(const std::string& dir);
  ~TensorBoardWriter();

  // One scalar at `step`. Flushed to disk by Flush().
  absl::Status AddScalar(const std::string& tag, double value, int64_t step);
  absl::Status Flush();
  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(std::string path, FILE* file) : path_(std::move(path)), file_(file) {}
  absl::Status WriteRecord(const std::string& data);
  std::string path_;
  FILE* file_;
};

}  // namespace multiscreen
