// File: common/tls/pem.h
//
// The PEM files of TLS, read and checked with OpenSSL before gRPC sees them:
// the server's certificate, key and client CA bundle (server/tls_files.h) and
// the clients' CA and client certificate (client/transport_security.h).
// gRPC reports a bad PEM file late and obscurely (a client channel with an
// unparsable CA fails every call "empty address list"; a server key that does
// not match its certificate fails each handshake), so both sides check here
// first and say which file is wrong and why.
//
// The functions return the reason alone ("no start line", "the key does not
// belong to the certificate"); callers name the file, its flag and the fix.
//
// Thread safety: pure functions (OpenSSL's error queue is per thread). The
// first call initialises OpenSSL without its atexit clean-up (gRPC's threads
// outlive exit()'s handlers; see pem.cc), so call one of these before gRPC
// first uses TLS, as LoadTlsMaterial and the client's channel do.
// Errors: see each function; never an exception, never a prompt (an
// encrypted key is an error, not a request for a passphrase).
#ifndef IPUPOD_TLS_PEM_H_
#define IPUPOD_TLS_PEM_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ipupod::tls {

// A PEM certificate chain or key is a few KB; a CA bundle (Debian's whole
// ca-certificates.crt) about 200 KB.
inline constexpr size_t kPemFileBytesMax = size_t{1} << 20;

// Reads `path` whole. `role` names it in messages ("--tls-ca file"). Errors:
// NOT_FOUND "ROLE 'PATH' does not exist"; PERMISSION_DENIED when it cannot
// be opened for reading; INVALID_ARGUMENT when it is not a regular file, is
// empty or is larger than kPemFileBytesMax; INTERNAL on a read error.
absl::StatusOr<std::string> ReadPemFile(absl::string_view path, absl::string_view role);

// What a PEM text's certificates are: how many, and the first one's subject
// and validity (the server's own certificate comes first in a chain).
struct CertificateSummary {
  int count = 0;
  std::string subject;     // "CN = localhost"
  std::string not_before;  // "Nov 27 21:00:00 2026 GMT"
  std::string not_after;
  bool expired = false;        // notAfter has passed
  bool not_yet_valid = false;  // notBefore is still to come
  int days_left = 0;           // whole days until notAfter (negative once expired)
};

// The certificates of `pem`, at least one. INVALID_ARGUMENT "holds no PEM
// certificate (-----BEGIN CERTIFICATE-----)", or "certificate N does not
// parse: " and OpenSSL's reason.
absl::StatusOr<CertificateSummary> ParseCertificates(absl::string_view pem);

// `pem` holds an unencrypted private key. INVALID_ARGUMENT with the reason:
// no "-----BEGIN ... PRIVATE KEY-----" block in it, an encrypted key (with the
// command that decrypts it), or "the private key does not parse: " and
// OpenSSL's reason.
absl::Status ParsePrivateKey(absl::string_view pem);

// The key of `key_pem` belongs to the first certificate of `cert_pem` (both
// parse: REQUIRES ParsePrivateKey and ParseCertificates succeeded).
// INVALID_ARGUMENT "the private key does not belong to the certificate"
// otherwise.
absl::Status CheckKeyMatchesCertificate(absl::string_view key_pem, absl::string_view cert_pem);

// How both sides report a file that holds the wrong thing, keeping the
// reason's code: "'PATH' (ROLE) is not WHAT: REASON; FIX".
absl::Status FileIsNot(const absl::Status& reason, absl::string_view path, absl::string_view role,
                       absl::string_view what, absl::string_view fix);

// A key file's text as both sides check it: ParsePrivateKey, then
// CheckKeyMatchesCertificate against `cert_pem` (REQUIRES: it parses),
// reported with FileIsNot: "'KEY' (ROLE) is not a PEM private key: ...;
// pass the key that matches --tls-cert" or "... is not the key of 'CERT':
// the private key does not belong to the certificate (CN = ...); ...".
absl::Status CheckKeyFile(absl::string_view key_path, absl::string_view key_pem,
                          absl::string_view cert_path, absl::string_view cert_pem,
                          absl::string_view role);

}  // namespace ipupod::tls

#endif  // IPUPOD_TLS_PEM_H_
