#include "server/auth.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/user_name.h"

namespace ipupod::server {
namespace {

constexpr absl::string_view kBearer = "bearer ";

absl::string_view View(const grpc::string_ref& ref) { return {ref.data(), ref.size()}; }

// All values of `key` (gRPC lower-cases metadata keys on the wire).
std::vector<absl::string_view> Values(const Metadata& metadata, absl::string_view key) {
  std::vector<absl::string_view> values;
  auto [begin, end] = metadata.equal_range(grpc::string_ref(key.data(), key.size()));
  for (auto it = begin; it != end; ++it) values.push_back(View(it->second));
  return values;
}

// Compares without an early exit, so timing does not reveal a matching prefix.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

absl::Status TokenRejected() {
  return absl::UnauthenticatedError(
      "missing or invalid token: send `authorization: Bearer <token>` with a token from the "
      "server's config (ipupod --token or $IPUPOD_TOKEN)");
}

absl::StatusOr<scheduler::Caller> FromToken(const AuthPolicy& policy, const Metadata& metadata) {
  std::vector<absl::string_view> values = Values(metadata, kAuthorizationHeader);
  if (values.size() != 1) return TokenRejected();
  absl::string_view value = values[0];
  if (value.size() <= kBearer.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kBearer.size()), kBearer)) {
    return TokenRejected();
  }
  absl::string_view token = absl::StripAsciiWhitespace(value.substr(kBearer.size()));
  const TokenEntry* match = FindToken(policy, token);
  if (match == nullptr) return TokenRejected();
  return scheduler::Caller{match->user, match->admin};
}

absl::StatusOr<scheduler::Caller> FromUserName(const AuthPolicy& policy, const Metadata& metadata) {
  std::vector<absl::string_view> values = Values(metadata, kUserHeader);
  if (values.empty() || (values.size() == 1 && values[0].empty())) {
    return absl::UnauthenticatedError("no user name: pass --user or set $USER");
  }
  if (values.size() > 1) {
    return absl::UnauthenticatedError("more than one x-ipupod-user header; send exactly one");
  }
  absl::string_view name = values[0];
  if (!IsValidUserName(name)) {
    return absl::UnauthenticatedError(InvalidUserNameMessage(name));
  }
  bool admin = std::find(policy.open_mode_admins.begin(), policy.open_mode_admins.end(), name) !=
               policy.open_mode_admins.end();
  return scheduler::Caller{std::string(name), admin};
}

}  // namespace

const TokenEntry* FindToken(const AuthPolicy& policy, absl::string_view token) {
  const TokenEntry* match = nullptr;
  for (const TokenEntry& entry : policy.tokens) {  // no early exit: see ConstantTimeEquals
    if (ConstantTimeEquals(entry.token, token) && match == nullptr) match = &entry;
  }
  return match;
}

absl::StatusOr<scheduler::Caller> Authenticate(const AuthPolicy& policy, const Metadata& metadata) {
  return policy.open_mode() ? FromUserName(policy, metadata) : FromToken(policy, metadata);
}

}  // namespace ipupod::server
