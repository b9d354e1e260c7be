// File: tests/support/test_certificates.h
//
// test_support::TestCertificates: a throwaway PKI for the TLS tests, made by
// tests/support/make_test_certificates.sh (Debian's `openssl` command) in a
// directory the caller owns (a TempDir), P-256 keys so it takes a fraction
// of a second:
//   ca.pem / ca.key                   the test CA
//   server.pem / server.key           signed by ca, subjectAltName
//                                     IP:127.0.0.1, DNS:localhost
//   server-dns.pem / server-dns.key   signed by ca, DNS:localhost only (a
//                                     certificate that does not name 127.0.0.1)
//   expired.pem / expired.key         signed by ca, notAfter yesterday
//   client.pem / client.key           signed by ca (a mutual-TLS client)
//   other-ca.pem / other-ca.key       an unrelated CA
//   other-client.pem / other-client.key  signed by other-ca
//   encrypted.key                     server.key encrypted with a passphrase
// The members hold the paths.
//
// Thread safety: construct once; then read-only.
// Errors: the constructor throws std::runtime_error with openssl's output
// when a command fails (a test cannot go on without its certificates).
#ifndef IPUPOD_TESTS_SUPPORT_TEST_CERTIFICATES_H_
#define IPUPOD_TESTS_SUPPORT_TEST_CERTIFICATES_H_

#include <string>

namespace ipupod::test_support {

struct TestCertificates {
  explicit TestCertificates(const std::string& dir);

  std::string ca, ca_key;
  std::string server_cert, server_key;
  std::string server_dns_cert, server_dns_key;
  std::string expired_cert, expired_key;
  std::string client_cert, client_key;
  std::string other_ca, other_ca_key;
  std::string other_client_cert, other_client_key;
  std::string encrypted_key;
};

}  // namespace ipupod::test_support

#endif  // IPUPOD_TESTS_SUPPORT_TEST_CERTIFICATES_H_
