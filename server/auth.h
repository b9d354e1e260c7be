// File: server/auth.h
//
// Who is calling, from a request's metadata.
//
// Token mode (tokens configured): `authorization: Bearer <token>`. A missing,
// malformed or unknown token is UNAUTHENTICATED, and the message never hints
// which tokens exist. Tokens are compared in constant time.
// Open mode (no tokens; the server listens on loopback only): the caller
// names itself with `x-ipupod-user`, 1..64 characters from [A-Za-z0-9._-@];
// missing or invalid is UNAUTHENTICATED. It is an admin iff its name is in
// open_mode_admins.
//
// Thread safety: AuthPolicy is immutable after construction; Authenticate is
// a pure function, safe from any thread.
#ifndef IPUPOD_SERVER_AUTH_H_
#define IPUPOD_SERVER_AUTH_H_

#include <map>
#include <string>
#include <vector>

#include <grpcpp/support/string_ref.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scheduler/scheduler.h"
#include "server/config.h"

namespace ipupod::server {

inline constexpr absl::string_view kAuthorizationHeader = "authorization";
inline constexpr absl::string_view kUserHeader = "x-ipupod-user";

struct AuthPolicy {
  std::vector<TokenEntry> tokens;  // empty = open mode
  std::vector<std::string> open_mode_admins;

  static AuthPolicy FromConfig(const ServerConfig& config) {
    return AuthPolicy{config.tokens, config.open_mode_admins};
  }
  bool open_mode() const { return tokens.empty(); }
};

// The shape of grpc::ServerContextBase::client_metadata().
using Metadata = std::multimap<grpc::string_ref, grpc::string_ref>;

absl::StatusOr<scheduler::Caller> Authenticate(const AuthPolicy& policy, const Metadata& metadata);

// The config entry of `token`, or null. Compares with every configured token
// in constant time (no early exit), so timing reveals neither a matching
// prefix nor which entry matched. The gRPC API and the HTTP listener
// (metrics, health) both check tokens with it.
const TokenEntry* FindToken(const AuthPolicy& policy, absl::string_view token);

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_AUTH_H_
