// CRC-32C (Castagnoli), through header-only Boost.CRC: Debian 12 ships no
// crc32c library and its Abseil predates absl/crc. Used for TensorBoard record
// framing and checkpoint dataset checksums.
#pragma once

#include <boost/crc.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace multiscreen {

// CRC-32C of a byte stream fed in pieces: Crc32c(whole) == Update(a), Update(b), value().
class Crc32cStream {
 public:
  void Update(const void* data, size_t size) { crc_.process_bytes(data, size); }
  uint32_t value() const { return crc_.checksum(); }
  // value() as 8 lowercase hex digits: how evaluations' identities and data fingerprints
  // store it ("e3069283").
  std::string hex() const {
    char digits[9];
    std::snprintf(digits, sizeof(digits), "%08x", value());
    return digits;
  }

 private:
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc_;
};

inline uint32_t Crc32c(const void* data, size_t size) {
  Crc32cStream crc;
  crc.Update(data, size);
  return crc.value();
}

}  // namespace multiscreen
