// File: client/transport_security.h
//
// TLS on the client's channel (ClientOptions::tls_ca, tls_cert, tls_key) and
// the rule that a token never travels in clear text to another machine.
//
//   * CheckTransportSecurity: the options fit together before anything is
//     read or sent. A token with no tls_ca to a server that is not loopback
//     (common/loopback.h) is FAILED_PRECONDITION, saying to pass --tls-ca;
//     tls_cert without tls_key (or the reverse), or either without tls_ca,
//     is INVALID_ARGUMENT. The CLI calls it while resolving its flags (a
//     usage error, exit 2); Client::Connect calls it too.
//   * ChannelCredentialsFor: insecure without tls_ca; else TLS trusting only
//     the CA in tls_ca, presenting tls_cert/tls_key when set. Each file is
//     read (at most 1 MiB) and checked with OpenSSL first (common/tls/pem.h), so a
//     bad file fails here, naming the flag, the file and what is wrong,
//     rather than every call failing with gRPC's "empty address list".
//
// Errors of ChannelCredentialsFor: those of tls::ReadPemFile (NOT_FOUND,
// PERMISSION_DENIED, INVALID_ARGUMENT); INVALID_ARGUMENT for a file that holds
// no certificate or key, or a key that does not belong to tls_cert;
// FAILED_PRECONDITION for an expired client certificate.
//
// Thread safety: pure functions (they read files).
#ifndef IPUPOD_CLIENT_TRANSPORT_SECURITY_H_
#define IPUPOD_CLIENT_TRANSPORT_SECURITY_H_

#include <memory>

#include <grpcpp/security/credentials.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/client.h"

namespace ipupod::client {

absl::Status CheckTransportSecurity(const ClientOptions& options);

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const ClientOptions& options);

}  // namespace ipupod::client

#endif  // IPUPOD_CLIENT_TRANSPORT_SECURITY_H_
