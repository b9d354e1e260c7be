// File: common/loopback.h
//
// The one rule for "this machine only", shared by ipupodd (open mode and a
// plaintext token listener must be loopback: server/config.h) and the client
// library (a token is never sent in clear text to another machine:
// client/transport_security.h).
//
// Thread safety: pure functions.
// Errors: none.
#ifndef IPUPOD_COMMON_LOOPBACK_H_
#define IPUPOD_COMMON_LOOPBACK_H_

#include "absl/strings/string_view.h"

namespace ipupod {

// 127.0.0.0/8, ::1, ::ffff:127.x.y.z or "localhost" (any case). Hosts come
// without brackets ("::1", not "[::1]").
bool IsLoopbackHost(absl::string_view host);

// Whether a gRPC target, as --server and ipupod.Client(server=...) take it,
// reaches this machine only: HOST:PORT or [V6]:PORT (or a bare HOST) with a
// loopback host, unix:PATH and unix-abstract:NAME, and dns:, ipv4: and ipv6:
// targets whose every address is loopback. Anything else (another host, a
// name that could resolve anywhere) is not.
bool IsLoopbackTarget(absl::string_view target);

}  // namespace ipupod

#endif  // IPUPOD_COMMON_LOOPBACK_H_
