#include "common/loopback.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include <arpa/inet.h>
#include <netinet/in.h>

namespace ipupod {
namespace {

// The host of "HOST:PORT", "[V6]:PORT", "[V6]" or a bare "HOST"; a bare IPv6
// address (two colons or more) is its own host.
absl::string_view HostOf(absl::string_view address) {
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    return close == absl::string_view::npos ? address : address.substr(1, close - 1);
  }
  const size_t colon = address.find(':');
  if (colon == absl::string_view::npos || address.find(':', colon + 1) != absl::string_view::npos) {
    return address;
  }
  return address.substr(0, colon);
}

// Every comma-separated address of an ipv4:/ipv6: target is loopback.
bool AllLoopback(absl::string_view addresses) {
  if (addresses.empty()) return false;
  for (absl::string_view address : absl::StrSplit(addresses, ',')) {
    if (!IsLoopbackHost(HostOf(address))) return false;
  }
  return true;
}

}  // namespace

bool IsLoopbackHost(absl::string_view host) {
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  std::string text(host);
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

bool IsLoopbackTarget(absl::string_view target) {
  if (absl::StartsWith(target, "unix:") || absl::StartsWith(target, "unix-abstract:")) {
    return true;
  }
  if (absl::ConsumePrefix(&target, "ipv4:") || absl::ConsumePrefix(&target, "ipv6:")) {
    return AllLoopback(target);
  }
  if (absl::ConsumePrefix(&target, "dns:")) {
    // dns:HOST:PORT or dns://AUTHORITY/HOST:PORT (the authority is the DNS
    // server to ask, not where the channel goes).
    if (absl::ConsumePrefix(&target, "//")) {
      const size_t slash = target.find('/');
      if (slash == absl::string_view::npos) return false;
      target.remove_prefix(slash + 1);
    }
  }
  return !target.empty() && IsLoopbackHost(HostOf(target));
}

}  // namespace ipupod
