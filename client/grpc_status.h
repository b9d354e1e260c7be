// File: client/grpc_status.h
//
// The client's edge between gRPC and absl::Status. ipupodd answers with a
// grpc::Status whose trailing metadata may carry a device error:
//   ipupod-error-kind       recoverable | unrecoverable | application
//   ipupod-recovery-action  IPU_RESET | LINK_RESET | PARTITION_RESET | FULL_RESET
//   ipupod-ipus             comma-separated IPU ids
// FromGrpcStatus rebuilds the absl::Status with the same code and message and
// the common/errors.h payloads, so GetErrorKind / GetRecoveryAction /
// GetErrorIpus read it exactly as they read a server-side status.
//
// Failures of the transport itself (nothing answered) are rewritten into a
// message that says what to do: "cannot reach ipupodd at HOST:PORT: ...".
// A TLS handshake that failed is UNAUTHENTICATED "TLS handshake with
// HOST:PORT failed: ..." naming the cause gRPC reported (the server's
// certificate not signed by --tls-ca, or not naming the address; a server
// that does not speak TLS) and the fix (TransportFailureError).
//
// Thread safety: all functions are pure.
#ifndef IPUPOD_CLIENT_GRPC_STATUS_H_
#define IPUPOD_CLIENT_GRPC_STATUS_H_

#include <map>
#include <string>

#include <grpcpp/support/status.h>
#include <grpcpp/support/string_ref.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ipupod::client {

// Trailing metadata as grpc::ClientContext::GetServerTrailingMetadata returns it.
using GrpcMetadata = std::multimap<grpc::string_ref, grpc::string_ref>;

// Metadata keys of the wire contract (proto/ipupod/v1/pod.proto).
inline constexpr absl::string_view kErrorKindKey = "ipupod-error-kind";
inline constexpr absl::string_view kRecoveryActionKey = "ipupod-recovery-action";
inline constexpr absl::string_view kIpusKey = "ipupod-ipus";
inline constexpr absl::string_view kUserKey = "x-ipupod-user";
inline constexpr absl::string_view kAuthorizationKey = "authorization";

// Same code and message; error payloads from the trailers. OK stays OK.
absl::Status FromGrpcStatus(const grpc::Status& status, const GrpcMetadata& trailers);

// True when `status` was produced by the transport rather than by ipupodd:
// UNAVAILABLE, no ipupod-* trailers, and one of gRPC's connection messages.
bool IsTransportFailure(const grpc::Status& status, const GrpcMetadata& trailers);

// UNAVAILABLE: "cannot reach ipupodd at SERVER: DETAIL; is it running? (...)".
absl::Status CannotReachError(absl::string_view server, absl::string_view detail);

// UNAVAILABLE: the attach stream broke after the grant; the server dropped
// the session with the connection.
absl::Status ConnectionLostError(absl::string_view session);

// What a unary call was, for messages.
struct CallSite {
  absl::string_view server;  // "127.0.0.1:50051"
  absl::string_view method;  // "GetPodInfo"
  absl::Duration timeout;    // the deadline the call had
  // How the channel was secured (ClientOptions): the CA file ("" = no TLS)
  // and whether a client certificate was presented.
  absl::string_view tls_ca = "";
  bool client_certificate = false;
};

// A transport failure (IsTransportFailure) explained for `site`'s channel:
//   TLS handshake failures: UNAUTHENTICATED "TLS handshake with SERVER
//   failed: the server's certificate is not signed by the CA in --tls-ca
//   'FILE' (...)" - or does not name the address, or the server does not
//   speak TLS - retrying cannot help, so not UNAVAILABLE;
//   a connection closed while connecting: UNAVAILABLE, saying that a TLS
//   server closes a plaintext client's connection (pass --tls-ca) and a
//   mutual-TLS server a client's without a certificate it accepts (pass
//   --tls-cert and --tls-key);
//   anything else: CannotReachError.
absl::Status TransportFailureError(const CallSite& site, absl::string_view detail);

// The full conversion of a finished unary call: FromGrpcStatus, plus the
// transport rewrite (TransportFailureError) and a client deadline rewrite
// ("ipupodd at SERVER did not answer METHOD within 30s; ...").
absl::Status ConvertCallStatus(const grpc::Status& status, const GrpcMetadata& trailers,
                               const CallSite& site);

// A tensor stream from ipupodd that wire::TensorAssembler rejected
// (INVALID_ARGUMENT from the receiver's point of view) is the server's
// fault, not the caller's: INTERNAL "ipupodd sent a malformed tensor stream:
// ...". Other codes (e.g. out of memory) pass through unchanged.
absl::Status ServerStreamError(const absl::Status& status);

// The canonical upper-case name of a code: "RESOURCE_EXHAUSTED".
std::string StatusCodeName(absl::StatusCode code);

}  // namespace ipupod::client

#endif  // IPUPOD_CLIENT_GRPC_STATUS_H_
