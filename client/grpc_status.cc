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

namespace {

bool Contains(absl::string_view lower_text, absl::string_view phrase) {
  return absl::StrContains(lower_text, phrase);
}

// The failed handshakes gRPC (1.51, OpenSSL 3) reports, explained; "" when
// `lower` is none of them.
std::string HandshakeProblem(const CallSite& site, absl::string_view lower) {
  if (Contains(lower, "certificate verify failed")) {
    return absl::StrCat("the server's certificate is not signed by the CA in --tls-ca '",
                        site.tls_ca,
                        "' (or has expired); pass the CA that signed the server's certificate");
  }
  if (Contains(lower, "is not in peer certificate")) {
    return absl::StrCat("the server's certificate does not name ", site.server,
                        " (its subjectAltName must list the host you connect to, as IP:... or "
                        "DNS:...); connect through a name it lists, or reissue the certificate");
  }
  if (Contains(lower, "wrong version number")) {
    return "the server does not speak TLS (it answered in plaintext); leave out --tls-ca "
           "($IPUPOD_TLS_CA), or configure \"tls\" on the server";
  }
  if (Contains(lower, "handshake failed")) {
    return "check --tls-ca, --tls-cert and --tls-key against the server's TLS configuration";
  }
  return "";
}

}  // namespace

absl::Status TransportFailureError(const CallSite& site, absl::string_view detail) {
  const std::string lower = absl::AsciiStrToLower(detail);
  if (!site.tls_ca.empty()) {
    std::string problem = HandshakeProblem(site, lower);
    if (!problem.empty()) {
      return absl::UnauthenticatedError(absl::StrCat("TLS handshake with ", site.server,
                                                     " failed: ", problem, " (", detail, ")"));
    }
  }
  // Closed while connecting: a TLS server closes a plaintext client's
  // connection, and a mutual-TLS server one without a certificate it accepts.
  if (Contains(lower, "failed to connect") && Contains(lower, "socket closed")) {
    if (site.tls_ca.empty()) {
      return CannotReachError(
          site.server, absl::StrCat(detail,
                                    " (the server closed the connection while connecting: if it "
                                    "serves TLS, pass --tls-ca FILE or set $IPUPOD_TLS_CA)"));
    }
    if (!site.client_certificate) {
      return absl::UnavailableError(absl::StrCat(
          "ipupodd at ", site.server,
          " closed the connection during the TLS handshake: it most likely requires a client "
          "certificate (mutual TLS); pass --tls-cert FILE and --tls-key FILE ($IPUPOD_TLS_CERT, "
          "$IPUPOD_TLS_KEY) with one its client CA signed (",
          detail, ")"));
    }
    return absl::UnavailableError(absl::StrCat(
        "ipupodd at ", site.server,
        " closed the connection during the TLS handshake: it may not accept the client "
        "certificate in --tls-cert (not signed by its client CA, or expired); check it with the "
        "server's operator (",
        detail, ")"));
  }
  return CannotReachError(site.server, detail);
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
    return TransportFailureError(site, status.error_message());
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
