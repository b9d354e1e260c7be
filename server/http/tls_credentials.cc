#include "server/http/tls_credentials.h"

#include <string>

#include "absl/strings/str_cat.h"
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

namespace ipupod::http {
namespace {

gnutls_datum_t Datum(absl::string_view pem) {
  return gnutls_datum_t{reinterpret_cast<unsigned char*>(const_cast<char*>(pem.data())),
                        static_cast<unsigned int>(pem.size())};
}

absl::Status CheckSize(absl::string_view pem, absl::string_view what) {
  if (pem.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the TLS ", what, " is empty; give its PEM text"));
  }
  if (pem.size() > kPemBytesMax) {
    return absl::InvalidArgumentError(absl::StrCat("the TLS ", what, " is ", pem.size(),
                                                   " bytes, more than any PEM file of one (",
                                                   kPemBytesMax, "); is it the right file?"));
  }
  if (pem.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("the TLS ", what, " holds a NUL byte, which no PEM text does; is it DER?"));
  }
  return absl::OkStatus();
}

absl::Status CheckCertificates(absl::string_view pem) {
  gnutls_x509_crt_t* certs = nullptr;
  unsigned int count = 0;
  const gnutls_datum_t data = Datum(pem);
  const int rc = gnutls_x509_crt_list_import2(&certs, &count, &data, GNUTLS_X509_FMT_PEM, 0);
  for (unsigned int i = 0; i < count; ++i) gnutls_x509_crt_deinit(certs[i]);
  gnutls_free(certs);
  if (rc >= 0 && count > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the TLS certificate is not a PEM certificate (-----BEGIN CERTIFICATE-----): ",
                   rc < 0 ? gnutls_strerror(rc) : "none found"));
}

absl::Status CheckKey(absl::string_view pem) {
  gnutls_x509_privkey_t key = nullptr;
  if (const int rc = gnutls_x509_privkey_init(&key); rc < 0) {
    return absl::ResourceExhaustedError(absl::StrCat("GnuTLS: ", gnutls_strerror(rc)));
  }
  const gnutls_datum_t data = Datum(pem);
  // No passphrase and GNUTLS_PKCS_PLAIN: an encrypted key fails, nothing prompts.
  const int rc =
      gnutls_x509_privkey_import2(key, &data, GNUTLS_X509_FMT_PEM, nullptr, GNUTLS_PKCS_PLAIN);
  gnutls_x509_privkey_deinit(key);
  if (rc >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the TLS private key is not an unencrypted PEM private key (-----BEGIN PRIVATE KEY-----): ",
      gnutls_strerror(rc)));
}

// The pair loaded as libmicrohttpd loads it (its MHD_init_daemon_certificate).
absl::Status CheckPair(absl::string_view cert_pem, absl::string_view key_pem) {
  gnutls_certificate_credentials_t credentials = nullptr;
  if (const int rc = gnutls_certificate_allocate_credentials(&credentials); rc < 0) {
    return absl::ResourceExhaustedError(absl::StrCat("GnuTLS: ", gnutls_strerror(rc)));
  }
  const gnutls_datum_t cert = Datum(cert_pem);
  const gnutls_datum_t key = Datum(key_pem);
  const int rc = gnutls_certificate_set_x509_key_mem2(credentials, &cert, &key, GNUTLS_X509_FMT_PEM,
                                                      nullptr, 0);
  gnutls_certificate_free_credentials(credentials);
  if (rc >= 0) return absl::OkStatus();
  if (rc == GNUTLS_E_CERTIFICATE_KEY_MISMATCH) {
    return absl::InvalidArgumentError(
        "the TLS private key does not belong to the certificate (the certificate's public key "
        "is another key's)");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "GnuTLS does not take the TLS certificate and key together: ", gnutls_strerror(rc)));
}

}  // namespace

absl::Status CheckTlsCredentials(absl::string_view cert_pem, absl::string_view key_pem) {
  if (absl::Status size = CheckSize(cert_pem, "certificate"); !size.ok()) return size;
  if (absl::Status size = CheckSize(key_pem, "private key"); !size.ok()) return size;
  if (absl::Status certs = CheckCertificates(cert_pem); !certs.ok()) return certs;
  if (absl::Status key = CheckKey(key_pem); !key.ok()) return key;
  return CheckPair(cert_pem, key_pem);
}

}  // namespace ipupod::http
