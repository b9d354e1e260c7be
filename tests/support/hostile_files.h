// File: tests/support/hostile_files.h
//
// Hand-made tensor files for the tests of hostile input: a one-member zip
// archive with any declared sizes (zip64 or not), a raw deflate stream of
// zeros streamed in 1 MiB pieces (a bomb costs the test no memory), and
// .npy headers with any shape.
//
// Header-only; users link ZLIB::ZLIB (tests/tensor, tests/integration).
// Thread safety: pure functions.
// Errors: none (zlib failures show as a test's parse error).
#ifndef IPUPOD_TESTS_SUPPORT_HOSTILE_FILES_H_
#define IPUPOD_TESTS_SUPPORT_HOSTILE_FILES_H_

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include <zlib.h>

namespace ipupod::test_support {

template <typename T>
void PutLe(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

struct ZipMember {
  std::string name = "w.npy";
  uint16_t method = 8;        // deflated
  std::string data;           // the bytes as stored
  uint64_t uncompressed = 0;  // as declared
  uint32_t crc = 0;
  bool zip64 = false;  // sizes in a zip64 extra field
};

inline std::string Zip(const ZipMember& m) {
  std::string extra;
  if (m.zip64) {
    PutLe<uint16_t>(extra, 1);
    PutLe<uint16_t>(extra, 16);
    PutLe<uint64_t>(extra, m.uncompressed);
    PutLe<uint64_t>(extra, m.data.size());
  }
  const auto common = [&](std::string& out) {
    PutLe<uint16_t>(out, 45);
    PutLe<uint16_t>(out, 0);
    PutLe<uint16_t>(out, m.method);
    PutLe<uint32_t>(out, 0);  // time, date
    PutLe<uint32_t>(out, m.crc);
    PutLe<uint32_t>(out, m.zip64 ? 0xffffffffu : static_cast<uint32_t>(m.data.size()));
    PutLe<uint32_t>(out, m.zip64 ? 0xffffffffu : static_cast<uint32_t>(m.uncompressed));
    PutLe<uint16_t>(out, static_cast<uint16_t>(m.name.size()));
    PutLe<uint16_t>(out, static_cast<uint16_t>(extra.size()));
  };
  std::string zip;
  PutLe<uint32_t>(zip, 0x04034b50);
  common(zip);
  zip += m.name + extra + m.data;
  const uint32_t cd_offset = static_cast<uint32_t>(zip.size());
  std::string cd;
  PutLe<uint32_t>(cd, 0x02014b50);
  PutLe<uint16_t>(cd, 45);
  common(cd);
  for (int i = 0; i < 3; ++i) PutLe<uint16_t>(cd, 0);  // comment, disk, internal attributes
  PutLe<uint32_t>(cd, 0);
  PutLe<uint32_t>(cd, 0);  // local header offset
  cd += m.name + extra;
  zip += cd;
  PutLe<uint32_t>(zip, 0x06054b50);
  PutLe<uint32_t>(zip, 0);
  PutLe<uint16_t>(zip, 1);
  PutLe<uint16_t>(zip, 1);
  PutLe<uint32_t>(zip, static_cast<uint32_t>(cd.size()));
  PutLe<uint32_t>(zip, cd_offset);
  PutLe<uint16_t>(zip, 0);
  return zip;
}

// Raw deflate of `head` followed by `zeros` zero bytes, streamed in 1 MiB
// pieces so the input never exists whole; `crc` gets their CRC-32.
inline std::string DeflateZeros(const std::string& head, uint64_t zeros, uint32_t& crc) {
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, -MAX_WBITS, 9, Z_DEFAULT_STRATEGY);
  const std::string block(size_t{1} << 20, '\0');
  std::string out, buffer(size_t{1} << 20, '\0');
  crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(head.data()), head.size()));
  const auto pump = [&](const char* data, size_t n, int flush) {
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
    z.avail_in = static_cast<uInt>(n);
    do {
      z.next_out = reinterpret_cast<Bytef*>(buffer.data());
      z.avail_out = static_cast<uInt>(buffer.size());
      deflate(&z, flush);
      out.append(buffer.data(), buffer.size() - z.avail_out);
    } while (z.avail_out == 0);
  };
  pump(head.data(), head.size(), Z_NO_FLUSH);
  for (uint64_t left = zeros; left > 0;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, block.size()));
    crc = static_cast<uint32_t>(crc32(crc, reinterpret_cast<const Bytef*>(block.data()), n));
    pump(block.data(), n, Z_NO_FLUSH);
    left -= n;
  }
  pump(nullptr, 0, Z_FINISH);
  deflateEnd(&z);
  return out;
}

// A float32 .npy header with `shape` (Python tuple text), format 1.0,
// padded as numpy pads it; no data.
inline std::string NpyHeaderWithShape(const std::string& shape) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  dict.append((64 - (10 + dict.size() + 1) % 64) % 64, ' ');
  dict += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  PutLe<uint16_t>(out, static_cast<uint16_t>(dict.size()));
  return out + dict;
}

inline std::string NpyHeader(int64_t n) { return NpyHeaderWithShape(absl::StrCat("(", n, ",)")); }

}  // namespace ipupod::test_support

#endif  // IPUPOD_TESTS_SUPPORT_HOSTILE_FILES_H_
