#include "client/ipx_header.h"

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace ipupod::client {
namespace {

uint32_t ReadLe32(absl::string_view bytes, size_t offset) {
  uint32_t value = 0;
  for (int i = 3; i >= 0; --i) {
    value = (value << 8) | static_cast<unsigned char>(bytes[offset + static_cast<size_t>(i)]);
  }
  return value;
}

}  // namespace

absl::StatusOr<std::string> IpxContentHash(absl::string_view ipx) {
  if (ipx.size() < kIpxHeaderBytes || ipx.substr(0, kIpxMagic.size()) != kIpxMagic) {
    return absl::InvalidArgumentError(
        "not an ipupod executable (.ipx): compile the model with `ipupod compile MODEL.onnx`");
  }
  const uint32_t version = ReadLe32(ipx, kIpxVersionOffset);
  if (version != kIpxFormatVersion) {
    return absl::InvalidArgumentError(absl::StrCat("executable format ", version,
                                                   " but this ipupod reads ", kIpxFormatVersion,
                                                   ": recompile with this version of ipupod"));
  }
  return absl::BytesToHexString(ipx.substr(kIpxHashOffset, kIpxHashBytes));
}

}  // namespace ipupod::client
