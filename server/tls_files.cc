#include "server/tls_files.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tls/pem.h"

namespace ipupod::server {
namespace {

// How each file is named in messages: its config key and its flag.
constexpr absl::string_view kCertRole = "tls.cert, --tls-cert";
constexpr absl::string_view kKeyRole = "tls.key, --tls-key";
constexpr absl::string_view kClientCaRole = "tls.client_ca, --tls-client-ca";

absl::StatusOr<std::string> Read(const std::string& path, absl::string_view role) {
  return tls::ReadPemFile(path, absl::StrCat("the TLS file (", role, ")"));
}

// The server's certificate: parses, and is valid now.
absl::StatusOr<tls::CertificateSummary> CheckServerCertificate(const std::string& path,
                                                               const std::string& pem) {
  absl::StatusOr<tls::CertificateSummary> cert = tls::ParseCertificates(pem);
  if (!cert.ok()) {
    return tls::FileIsNot(cert.status(), path, kCertRole, "a PEM certificate",
                          "pass the server's certificate (chain) in PEM, as `openssl x509 -in FILE "
                          "-noout -text` reads it");
  }
  if (cert->expired) {
    return absl::FailedPreconditionError(
        absl::StrCat("the TLS certificate '", path, "' (", kCertRole, ", ", cert->subject,
                     ") expired: its notAfter is ", cert->not_after,
                     "; renew it (docs/configuration.md, \"Transport security\") and start again"));
  }
  if (cert->not_yet_valid) {
    return absl::FailedPreconditionError(
        absl::StrCat("the TLS certificate '", path, "' (", kCertRole, ", ", cert->subject,
                     ") is not valid before its notBefore, ", cert->not_before,
                     "; check this machine's clock, or wait until then"));
  }
  return cert;
}

absl::Status CheckClientCa(const std::string& path, const std::string& pem) {
  absl::StatusOr<tls::CertificateSummary> ca = tls::ParseCertificates(pem);
  if (!ca.ok()) {
    return tls::FileIsNot(
        ca.status(), path, kClientCaRole, "a PEM CA bundle",
        "pass the certificate(s) of the CA that signs your clients' certificates");
  }
  return absl::OkStatus();
}

std::string Summary(const tls::CertificateSummary& cert, bool mutual) {
  return absl::StrCat("certificate ", cert.subject, ", valid until ", cert.not_after, " (",
                      cert.days_left, cert.days_left == 1 ? " day" : " days", " left)",
                      mutual ? "; client certificates required" : "; no client certificates");
}

}  // namespace

absl::StatusOr<TlsMaterial> LoadTlsMaterial(const TlsFiles& files) {
  TlsMaterial material;
  if (!files.enabled()) return material;
  IPUPOD_ASSIGN_OR_RETURN(std::string cert_pem, Read(files.cert, kCertRole));
  IPUPOD_ASSIGN_OR_RETURN(tls::CertificateSummary cert,
                          CheckServerCertificate(files.cert, cert_pem));
  IPUPOD_ASSIGN_OR_RETURN(std::string key_pem, Read(files.key, kKeyRole));
  IPUPOD_RETURN_IF_ERROR(tls::CheckKeyFile(files.key, key_pem, files.cert, cert_pem, kKeyRole));
  if (!files.client_ca.empty()) {
    IPUPOD_ASSIGN_OR_RETURN(material.client_ca_pem, Read(files.client_ca, kClientCaRole));
    IPUPOD_RETURN_IF_ERROR(CheckClientCa(files.client_ca, material.client_ca_pem));
  }
  material.cert_pem = std::move(cert_pem);
  material.key_pem = std::move(key_pem);
  material.summary = Summary(cert, !files.client_ca.empty());
  return material;
}

std::shared_ptr<grpc::ServerCredentials> GrpcServerCredentials(const TlsMaterial& material) {
  if (!material.enabled()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      material.client_ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                     : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = material.client_ca_pem;
  options.pem_key_cert_pairs.push_back({material.key_pem, material.cert_pem});
  return grpc::SslServerCredentials(options);
}

}  // namespace ipupod::server
