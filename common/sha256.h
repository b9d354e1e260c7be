// File: common/sha256.h
//
// SHA-256 (FIPS 180-4): the content hash of executables (.ipx), the
// executable cache key, and the name of every blob in the jobs' content
// store (client and server hash the same bytes the same way). Written here
// to keep ipupod free of a crypto dependency; tested against the FIPS/NIST
// vectors.
//
// Thread safety: Sha256 is a plain value (one per thread); the free
// functions are pure.
// Errors: none.
#ifndef IPUPOD_COMMON_SHA256_H_
#define IPUPOD_COMMON_SHA256_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace ipupod {

using Sha256Digest = std::array<uint8_t, 32>;

// Incremental hashing: Update any number of times, then Finish once.
class Sha256 {
 public:
  Sha256();
  void Update(absl::string_view bytes);
  // REQUIRES: called once; the object is spent afterwards.
  Sha256Digest Finish();

 private:
  void Compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

Sha256Digest Sha256Of(absl::string_view bytes);
// Lower-case hex, 64 characters.
std::string DigestHex(const Sha256Digest& digest);

}  // namespace ipupod

#endif  // IPUPOD_COMMON_SHA256_H_
