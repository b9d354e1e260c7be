// File: server/http/credentials.h
//
// The token an HTTP request presents, read from its Authorization header:
//   Authorization: Bearer <token>          what Prometheus sends with
//                                          `authorization: {credentials: ...}`
//   Authorization: Basic base64(user:token) what a browser sends after its
//                                          prompt; the user name is ignored,
//                                          the password is the token
// The scheme is case-insensitive; surrounding spaces are ignored. Anything
// else (another scheme, bad base64, no colon, an empty token) presents no
// token. The listener then answers 401 exactly as for a wrong token, so a
// client learns nothing about which tokens exist.
//
// Thread safety: pure functions.
#ifndef IPUPOD_HTTP_CREDENTIALS_H_
#define IPUPOD_HTTP_CREDENTIALS_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace ipupod::http {

// The longest Authorization header value looked at (longer: no token).
inline constexpr size_t kAuthorizationBytesMax = 4096;

std::optional<std::string> PresentedToken(absl::string_view authorization);

}  // namespace ipupod::http

#endif  // IPUPOD_HTTP_CREDENTIALS_H_
