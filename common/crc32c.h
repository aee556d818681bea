// CRC-32C (Castagnoli), through header-only Boost.CRC: Debian 12 ships no
// crc32c library and its Abseil predates absl/crc. Used for TensorBoard record
// framing and checkpoint dataset checksums.
#pragma once

#include <boost/crc.hpp>
#include <cstddef>
#include <cstdint>

namespace multiscreen {

inline uint32_t Crc32c(const void* data, size_t size) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data, size);
  return crc.checksum();
}

}  // namespace multiscreen
