// File: http/tls_credentials.h
//
// TlsCredentials: a server certificate (with any intermediate certificates
// after it) and its private key, parsed from PEM held in memory, checked to
// belong together, and installed into an OpenSSL SSL_CTX (civetweb's, from
// its init_ssl callback: nothing is read from a file path).
//
//   IPUPOD_ASSIGN_OR_RETURN(auto tls, TlsCredentials::FromPem(cert_pem, key_pem));
//   ... tls->InstallIn(ssl_ctx) ...   // TLS 1.2 at least
//
// Errors: FromPem - INVALID_ARGUMENT when either is empty or larger than
// kPemBytesMax, the certificate is not a PEM certificate, the key is not an
// unencrypted PEM private key (an encrypted one is refused, never prompted
// for), or the key does not belong to the certificate; the message says
// which and what OpenSSL said. InstallIn - INTERNAL when OpenSSL refuses.
//
// Thread safety: immutable after FromPem; InstallIn may be called from any
// thread (OpenSSL reference-counts what it shares).
#ifndef IPUPOD_HTTP_TLS_CREDENTIALS_H_
#define IPUPOD_HTTP_TLS_CREDENTIALS_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include <openssl/types.h>

namespace ipupod::http {

inline constexpr size_t kPemBytesMax = size_t{1} << 20;

class TlsCredentials {
 public:
  static absl::StatusOr<std::shared_ptr<const TlsCredentials>> FromPem(absl::string_view cert_pem,
                                                                       absl::string_view key_pem);
  ~TlsCredentials();
  TlsCredentials(const TlsCredentials&) = delete;
  TlsCredentials& operator=(const TlsCredentials&) = delete;

  absl::Status InstallIn(SSL_CTX* ctx) const;

 private:
  TlsCredentials() = default;

  X509* leaf_ = nullptr;
  std::vector<X509*> chain_;  // intermediates, in the PEM's order
  EVP_PKEY* key_ = nullptr;
};

}  // namespace ipupod::http

#endif  // IPUPOD_HTTP_TLS_CREDENTIALS_H_
