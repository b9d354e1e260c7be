#include "server/http/credentials.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"

namespace ipupod::http {
namespace {

// The credentials after `scheme ` (case-insensitive), if the header uses it.
std::optional<absl::string_view> AfterScheme(absl::string_view header, absl::string_view scheme) {
  if (header.size() <= scheme.size() || !absl::StartsWithIgnoreCase(header, scheme) ||
      header[scheme.size()] != ' ') {
    return std::nullopt;
  }
  return absl::StripAsciiWhitespace(header.substr(scheme.size() + 1));
}

}  // namespace

std::optional<std::string> PresentedToken(absl::string_view authorization) {
  if (authorization.size() > kAuthorizationBytesMax) return std::nullopt;
  const absl::string_view header = absl::StripAsciiWhitespace(authorization);
  if (std::optional<absl::string_view> bearer = AfterScheme(header, "Bearer")) {
    if (bearer->empty()) return std::nullopt;
    return std::string(*bearer);
  }
  std::optional<absl::string_view> basic = AfterScheme(header, "Basic");
  std::string decoded;
  if (!basic || !absl::Base64Unescape(*basic, &decoded)) return std::nullopt;
  const size_t colon = decoded.find(':');
  if (colon == std::string::npos || colon + 1 == decoded.size()) return std::nullopt;
  return decoded.substr(colon + 1);
}

}  // namespace ipupod::http
