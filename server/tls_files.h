// File: server/tls_files.h
//
// The TLS material of ipupodd's listeners: LoadTlsMaterial reads the files a
// ServerConfig names (TlsFiles: "tls" in the config, --tls-cert, --tls-key,
// --tls-client-ca) at start, checks them with OpenSSL (common/tls/pem.h) and returns
// their PEM texts, which the gRPC listener (GrpcServerCredentials) and the
// metrics/status listener take as they are. Checked before the server opens
// anything, so a bad file stops the start with a message naming the file, the
// flag, what is wrong and what to do (ipupodd exits 2), never a crash and
// never a listener that fails every handshake:
//   * a file that is missing (NOT_FOUND), unreadable (PERMISSION_DENIED), not
//     a regular file, empty or over 1 MiB (INVALID_ARGUMENT);
//   * a certificate file without a certificate, or one that does not parse;
//     a key file without an (unencrypted) private key (INVALID_ARGUMENT);
//   * a key that does not belong to the certificate (INVALID_ARGUMENT);
//   * a server certificate past its notAfter or before its notBefore
//     (FAILED_PRECONDITION, naming the date);
//   * a client CA bundle without a certificate (INVALID_ARGUMENT).
//
// Thread safety: pure functions (they read files).
#ifndef IPUPOD_SERVER_TLS_FILES_H_
#define IPUPOD_SERVER_TLS_FILES_H_

#include <memory>
#include <string>

#include <grpcpp/security/server_credentials.h>

#include "absl/status/statusor.h"
#include "server/config.h"

namespace ipupod::server {

// PEM texts as read (all "" when TLS is off).
struct TlsMaterial {
  std::string cert_pem;       // the server's certificate (chain)
  std::string key_pem;        // its private key
  std::string client_ca_pem;  // "" = no client certificates asked for
  // For the start-up log: "certificate CN = localhost, valid until Nov 27
  // 21:00:00 2027 GMT (364 days left); client certificates required".
  std::string summary;
  bool enabled() const { return !cert_pem.empty(); }
};

// Reads and checks `files`; an empty TlsMaterial when !files.enabled().
absl::StatusOr<TlsMaterial> LoadTlsMaterial(const TlsFiles& files);

// The gRPC listener's credentials: insecure without TLS; TLS with the
// material's certificate and key; with a client CA, clients must present a
// certificate it signed (GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY).
std::shared_ptr<grpc::ServerCredentials> GrpcServerCredentials(const TlsMaterial& material);

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_TLS_FILES_H_
