// File: server/http/tls_credentials.h
//
// CheckTlsCredentials: whether a server certificate (with any intermediate
// certificates after it) and its private key, as PEM text, are what GnuTLS -
// the TLS library libmicrohttpd serves HTTPS with - will load: the
// certificates parse, the key parses without a passphrase, and the key
// belongs to the first certificate. HttpListener::Start calls it before
// handing the PEM to libmicrohttpd, whose own failure would say only "could
// not start". The check loads the pair exactly as libmicrohttpd does
// (gnutls_certificate_set_x509_key_mem2), so what passes here loads there.
//
//   IPUPOD_RETURN_IF_ERROR(CheckTlsCredentials(cert_pem, key_pem));
//
// Errors: INVALID_ARGUMENT when either is empty, larger than kPemBytesMax or
// holds a NUL byte, the certificate is not a PEM certificate, the key is not
// an unencrypted PEM private key (an encrypted one is refused, never
// prompted for), or the key does not belong to the certificate; the message
// says which and what GnuTLS said.
//
// Thread safety: a pure function.
#ifndef IPUPOD_HTTP_TLS_CREDENTIALS_H_
#define IPUPOD_HTTP_TLS_CREDENTIALS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ipupod::http {

inline constexpr size_t kPemBytesMax = size_t{1} << 20;

absl::Status CheckTlsCredentials(absl::string_view cert_pem, absl::string_view key_pem);

}  // namespace ipupod::http

#endif  // IPUPOD_HTTP_TLS_CREDENTIALS_H_
