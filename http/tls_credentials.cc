#include "http/tls_credentials.h"

#include <string>

#include "absl/strings/str_cat.h"
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

namespace ipupod::http {
namespace {

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
using Bio = std::unique_ptr<BIO, BioFree>;

// OpenSSL's queued errors as one line (and the queue emptied).
std::string OpenSslErrors() {
  std::string text;
  while (const unsigned long code = ERR_get_error()) {
    char line[256];
    ERR_error_string_n(code, line, sizeof line);
    absl::StrAppend(&text, text.empty() ? "" : "; ", line);
  }
  return text.empty() ? "no detail" : text;
}

Bio MemoryBio(absl::string_view pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Never prompts for a passphrase (OpenSSL's default would read the terminal).
int NoPassphrase(char*, int, int, void*) { return 0; }

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
  return absl::OkStatus();
}

}  // namespace

TlsCredentials::~TlsCredentials() {
  X509_free(leaf_);
  for (X509* cert : chain_) X509_free(cert);
  EVP_PKEY_free(key_);
}

absl::StatusOr<std::shared_ptr<const TlsCredentials>> TlsCredentials::FromPem(
    absl::string_view cert_pem, absl::string_view key_pem) {
  if (absl::Status size = CheckSize(cert_pem, "certificate"); !size.ok()) return size;
  if (absl::Status size = CheckSize(key_pem, "private key"); !size.ok()) return size;
  ERR_clear_error();
  std::shared_ptr<TlsCredentials> tls(new TlsCredentials());
  Bio certs = MemoryBio(cert_pem);
  tls->leaf_ = PEM_read_bio_X509(certs.get(), nullptr, NoPassphrase, nullptr);
  if (tls->leaf_ == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("the TLS certificate is not a PEM certificate (-----BEGIN CERTIFICATE-----): ",
                     OpenSslErrors()));
  }
  while (X509* next = PEM_read_bio_X509(certs.get(), nullptr, NoPassphrase, nullptr)) {
    tls->chain_.push_back(next);
  }
  ERR_clear_error();  // the end of the chain reads as "no start line"
  Bio key = MemoryBio(key_pem);
  tls->key_ = PEM_read_bio_PrivateKey(key.get(), nullptr, NoPassphrase, nullptr);
  if (tls->key_ == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the TLS private key is not an unencrypted PEM private key (-----BEGIN PRIVATE KEY-----): ",
        OpenSslErrors()));
  }
  if (X509_check_private_key(tls->leaf_, tls->key_) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the TLS private key does not belong to the certificate (the certificate's public key is "
        "another key's): ",
        OpenSslErrors()));
  }
  return tls;
}

absl::Status TlsCredentials::InstallIn(SSL_CTX* ctx) const {
  ERR_clear_error();
  bool ok = SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) == 1 &&
            SSL_CTX_use_certificate(ctx, leaf_) == 1;
  for (X509* cert : chain_) ok = ok && SSL_CTX_add1_chain_cert(ctx, cert) == 1;
  ok = ok && SSL_CTX_use_PrivateKey(ctx, key_) == 1 && SSL_CTX_check_private_key(ctx) == 1;
  if (ok) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("OpenSSL refused the TLS certificate or key: ", OpenSslErrors()));
}

}  // namespace ipupod::http
