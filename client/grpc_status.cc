#include "client/grpc_status.h"

#include <array>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/errors.h"

namespace ipupod::client {
namespace {

absl::string_view View(const grpc::string_ref& ref) { return {ref.data(), ref.size()}; }

// The value of the first `key` in `trailers`, or "".
absl::string_view Trailer(const GrpcMetadata& trailers, absl::string_view key) {
  for (const auto& [k, v] : trailers) {
    if (View(k) == key) return View(v);
  }
  return "";
}

bool HasIpupodTrailers(const GrpcMetadata& trailers) {
  for (const auto& entry : trailers) {
    if (absl::StartsWith(View(entry.first), "ipupod-")) return true;
  }
  return false;
}

// Texts gRPC core (1.51) uses when no server produced the status. Matched
// case-insensitively so small wording changes across versions still match.
constexpr std::array<absl::string_view, 14> kTransportPhrases = {
    "failed to connect",
    "connection refused",
    "dns resolution failed",
    "socket closed",
    "connection reset",
    "broken pipe",
    "goaway",
    "endpoint",
    "connections to all backends failing",
    "empty address list",
    "transport closed",
    "keepalive",
    "name resolution",
    "no route to host"};

}  // namespace

absl::Status FromGrpcStatus(const grpc::Status& status, const GrpcMetadata& trailers) {
  if (status.ok()) return absl::OkStatus();
  // grpc::StatusCode and absl::StatusCode share the canonical numbering.
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  SetErrorPayloads(out, Trailer(trailers, kErrorKindKey), Trailer(trailers, kRecoveryActionKey),
                   Trailer(trailers, kIpusKey));
  return out;
}

bool IsTransportFailure(const grpc::Status& status, const GrpcMetadata& trailers) {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return false;
  if (HasIpupodTrailers(trailers)) return false;
  std::string message = absl::AsciiStrToLower(status.error_message());
  for (absl::string_view phrase : kTransportPhrases) {
    if (absl::StrContains(message, phrase)) return true;
  }
  return false;
}

absl::Status CannotReachError(absl::string_view server, absl::string_view detail) {
  return absl::UnavailableError(
      absl::StrCat("cannot reach ipupodd at ", server, ": ", detail,
                   "; is it running? (start it with `ipupodd --listen ", server,
                   " --state-dir DIR`, or point --server / IPUPOD_SERVER at the running one)"));
}

absl::Status ConnectionLostError(absl::string_view session) {
  return absl::UnavailableError(
      absl::StrCat("connection to ipupodd lost; session ", session,
                   " has ended and its IPUs were released (sessions do not survive a server "
                   "restart); attach again when the server is back"));
}

absl::Status ConvertCallStatus(const grpc::Status& status, const GrpcMetadata& trailers,
                               const CallSite& site) {
  if (IsTransportFailure(status, trailers)) {
    return CannotReachError(site.server, status.error_message());
  }
  // gRPC's own text for a client-side deadline; a server-chosen
  // DEADLINE_EXCEEDED has its own message and is kept.
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
      status.error_message() == "Deadline Exceeded") {
    return absl::DeadlineExceededError(
        absl::StrCat("ipupodd at ", site.server, " did not answer ", site.method, " within ",
                     absl::FormatDuration(site.timeout),
                     "; the server may be overloaded or stuck (raise --timeout to wait longer)"));
  }
  return FromGrpcStatus(status, trailers);
}

absl::Status ServerStreamError(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kInvalidArgument) return status;
  return absl::InternalError(
      absl::StrCat("ipupodd sent a malformed tensor stream: ", status.message()));
}

std::string StatusCodeName(absl::StatusCode code) { return absl::StatusCodeToString(code); }

}  // namespace ipupod::client
