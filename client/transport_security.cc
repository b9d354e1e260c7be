#include "client/transport_security.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/loopback.h"
#include "common/status_macros.h"
#include "common/tls/pem.h"

namespace ipupod::client {
namespace {

constexpr absl::string_view kCaRole = "--tls-ca file ($IPUPOD_TLS_CA)";
constexpr absl::string_view kCertRole = "--tls-cert file ($IPUPOD_TLS_CERT)";
constexpr absl::string_view kKeyRole = "--tls-key file ($IPUPOD_TLS_KEY)";

absl::StatusOr<std::string> ReadCa(const std::string& path) {
  IPUPOD_ASSIGN_OR_RETURN(std::string pem, tls::ReadPemFile(path, kCaRole));
  absl::StatusOr<tls::CertificateSummary> ca = tls::ParseCertificates(pem);
  if (!ca.ok()) {
    return tls::FileIsNot(ca.status(), path, kCaRole, "a PEM CA certificate",
                          "pass the certificate of the CA that signed the server's certificate");
  }
  return pem;
}

// The client certificate and its key, for servers with mutual TLS.
absl::Status ReadClientCertificate(const ClientOptions& options, grpc::SslCredentialsOptions& ssl) {
  IPUPOD_ASSIGN_OR_RETURN(ssl.pem_cert_chain, tls::ReadPemFile(options.tls_cert, kCertRole));
  absl::StatusOr<tls::CertificateSummary> cert = tls::ParseCertificates(ssl.pem_cert_chain);
  if (!cert.ok()) {
    return tls::FileIsNot(cert.status(), options.tls_cert, kCertRole, "a PEM certificate",
                          "pass your client certificate, signed by the CA the server trusts");
  }
  if (cert->expired) {
    return absl::FailedPreconditionError(
        absl::StrCat("the client certificate '", options.tls_cert, "' (", cert->subject,
                     ") expired: its notAfter is ", cert->not_after, "; get a new one"));
  }
  IPUPOD_ASSIGN_OR_RETURN(ssl.pem_private_key, tls::ReadPemFile(options.tls_key, kKeyRole));
  return tls::CheckKeyFile(options.tls_key, ssl.pem_private_key, options.tls_cert,
                           ssl.pem_cert_chain, kKeyRole);
}

}  // namespace

absl::Status CheckTransportSecurity(const ClientOptions& options) {
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a client certificate needs both --tls-cert and --tls-key ($IPUPOD_TLS_CERT, "
                     "$IPUPOD_TLS_KEY), but only ",
                     options.tls_cert.empty() ? "--tls-key" : "--tls-cert", " is set"));
  }
  if (!options.tls_cert.empty() && options.tls_ca.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key are for TLS, which needs --tls-ca FILE ($IPUPOD_TLS_CA): the "
        "CA that signed the server's certificate");
  }
  if (!options.token.empty() && options.tls_ca.empty() && !IsLoopbackTarget(options.server)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to send the token to ", options.server,
        " in clear text: it is not a loopback address and TLS is off; pass --tls-ca FILE "
        "($IPUPOD_TLS_CA), the CA that signed the server's certificate, or reach the server "
        "through a loopback address (an SSH tunnel, a local TLS proxy)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const ClientOptions& options) {
  IPUPOD_RETURN_IF_ERROR(CheckTransportSecurity(options));
  if (options.tls_ca.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  IPUPOD_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadCa(options.tls_ca));
  if (!options.tls_cert.empty()) IPUPOD_RETURN_IF_ERROR(ReadClientCertificate(options, ssl));
  return grpc::SslCredentials(ssl);
}

}  // namespace ipupod::client
