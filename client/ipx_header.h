// File: client/ipx_header.h
//
// The fixed 64-byte header of an .ipx executable, as much as the client
// needs before an upload: the magic, the format version and the payload's
// SHA-256 (device/compiler/executable.h documents the whole layout). The client
// library reads it itself so that it links no compiler; the server checks
// the hash against the payload when the upload arrives.
// tests/client/ipx_header_test.cc pins these constants to device/compiler/'s.
//
// Thread safety: pure functions.
// Errors: INVALID_ARGUMENT "not an ipupod executable (.ipx): ..." for a
// short file or a wrong magic; INVALID_ARGUMENT "executable format N but
// this ipupod reads M: recompile ..." for another format version.
#ifndef IPUPOD_CLIENT_IPX_HEADER_H_
#define IPUPOD_CLIENT_IPX_HEADER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ipupod::client {

inline constexpr absl::string_view kIpxMagic{"\x89IPX\r\n\x1a\n", 8};
inline constexpr uint32_t kIpxFormatVersion = 1;
inline constexpr size_t kIpxHeaderBytes = 64;
inline constexpr size_t kIpxVersionOffset = 8;
inline constexpr size_t kIpxHashOffset = 24;
inline constexpr size_t kIpxHashBytes = 32;

// The payload's SHA-256 from the header, as lower-case hex (what
// ExecutionService keys its cache by).
absl::StatusOr<std::string> IpxContentHash(absl::string_view ipx);

}  // namespace ipupod::client

#endif  // IPUPOD_CLIENT_IPX_HEADER_H_
