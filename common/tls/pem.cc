#include "common/tls/pem.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ipupod::tls {
namespace {

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Certificate = std::unique_ptr<X509, X509Free>;
using PrivateKey = std::unique_ptr<EVP_PKEY, KeyFree>;

// OpenSSL, initialised without its atexit clean-up, before any other use:
// gRPC's threads are not joined before exit() (the client's detached clean-up
// thread, a server's pollers), and a clean-up that frees OpenSSL's locks while
// one of them still takes them is a use after free at exit (ThreadSanitizer
// saw it in the CLI). The process's memory goes back to the OS anyway. Only
// the first initialisation decides, so every function here calls this first.
void InitOpenSsl() {
  static const bool initialised = OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) == 1;
  (void)initialised;
}

// A read-only memory BIO over `text` (which outlives it).
Bio MemoryBio(absl::string_view text) {
  return Bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// OpenSSL's reason for the first error on this thread's queue (the cause:
// "bad base64 decode", "wrong tag"; later entries only say which layer
// passed it on), and clears the queue.
std::string OpenSslReason() {
  const char* data = nullptr;
  int flags = 0;
  const unsigned long error = ERR_peek_error_data(&data, &flags);
  std::string reason;
  if (const char* text = ERR_reason_error_string(error); text != nullptr) {
    reason = text;
  } else if (error != 0) {
    char buffer[256];
    ERR_error_string_n(error, buffer, sizeof buffer);
    reason = buffer;
  } else {
    reason = "unknown OpenSSL error";
  }
  // OpenSSL 3's decoders say "unsupported" and put the detail here.
  if ((flags & ERR_TXT_STRING) != 0 && data != nullptr && *data != '\0') {
    absl::StrAppend(&reason, " (", data, ")");
  }
  ERR_clear_error();
  return reason;
}

// Whether `pem` has a block whose label ends in "PRIVATE KEY" (PKCS#8, and
// the traditional RSA, EC and DSA forms).
bool HasPrivateKeyBlock(absl::string_view pem) {
  for (size_t at = pem.find("-----BEGIN "); at != absl::string_view::npos;
       at = pem.find("-----BEGIN ", at + 1)) {
    const size_t end = pem.find("-----", at + 11);
    if (end == absl::string_view::npos) return false;
    if (absl::EndsWith(pem.substr(at + 11, end - at - 11), "PRIVATE KEY")) return true;
  }
  return false;
}

// True when the error queue's last entry says "no more PEM blocks of the
// kind asked for" (the end of a chain, or none at all).
bool AtEndOfPem() {
  const unsigned long error = ERR_peek_last_error();
  return ERR_GET_LIB(error) == ERR_LIB_PEM && ERR_GET_REASON(error) == PEM_R_NO_START_LINE;
}

// A BIO's contents as a string (what X509_NAME_print_ex and ASN1_TIME_print wrote).
std::string BioText(BIO* bio) {
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  return size > 0 ? std::string(data, static_cast<size_t>(size)) : std::string();
}

std::string TimeText(const ASN1_TIME* time) {
  Bio out(BIO_new(BIO_s_mem()));
  if (out == nullptr || ASN1_TIME_print(out.get(), time) != 1) return "(unreadable time)";
  return BioText(out.get());
}

std::string SubjectText(X509* cert) {
  Bio out(BIO_new(BIO_s_mem()));
  if (out == nullptr ||
      X509_NAME_print_ex(out.get(), X509_get_subject_name(cert), 0, XN_FLAG_ONELINE) < 0) {
    return "(unreadable subject)";
  }
  return BioText(out.get());
}

CertificateSummary Summarise(X509* cert) {
  CertificateSummary summary;
  summary.subject = SubjectText(cert);
  summary.not_before = TimeText(X509_get0_notBefore(cert));
  summary.not_after = TimeText(X509_get0_notAfter(cert));
  summary.expired = X509_cmp_current_time(X509_get0_notAfter(cert)) < 0;
  summary.not_yet_valid = X509_cmp_current_time(X509_get0_notBefore(cert)) > 0;
  int days = 0;
  int seconds = 0;
  if (ASN1_TIME_diff(&days, &seconds, nullptr, X509_get0_notAfter(cert)) == 1) {
    summary.days_left = days;
  }
  return summary;
}

// Never prompts: an encrypted key fails to load instead of asking a
// terminal (a daemon has none) for its passphrase.
int NoPassphrase(char* /*buffer*/, int /*size*/, int /*rwflag*/, void* /*user*/) { return 0; }

absl::StatusOr<PrivateKey> ReadKey(absl::string_view pem) {
  InitOpenSsl();
  if (!HasPrivateKeyBlock(pem)) {
    return absl::InvalidArgumentError("holds no PEM private key (-----BEGIN PRIVATE KEY-----)");
  }
  ERR_clear_error();
  Bio bio = MemoryBio(pem);
  PrivateKey key(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  if (key != nullptr) return key;
  if (absl::StrContains(pem, "ENCRYPTED")) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        "the key is encrypted and ipupod reads keys without a passphrase; decrypt it once "
        "with `openssl pkey -in KEY -out KEY.plain` and keep that file readable only by its "
        "user");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("the private key does not parse: ", OpenSslReason()));
}

absl::StatusOr<Certificate> ReadFirstCertificate(absl::string_view pem) {
  InitOpenSsl();
  ERR_clear_error();
  Bio bio = MemoryBio(pem);
  Certificate cert(PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr));
  if (cert == nullptr) return absl::InvalidArgumentError(OpenSslReason());
  return cert;
}

}  // namespace

absl::StatusOr<std::string> ReadPemFile(absl::string_view path, absl::string_view role) {
  const std::string p(path);
  const std::string named = absl::StrCat(role, " '", p, "'");
  // O_NONBLOCK: a FIFO in the file's place must not block the start.
  const int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT || error == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat(named, " does not exist; check the path"));
    }
    const std::string why = absl::StrCat(named, " cannot be read: ", std::strerror(error));
    if (error == EACCES || error == EPERM) {
      return absl::PermissionDeniedError(
          absl::StrCat(why, "; make it readable by the user this program runs as"));
    }
    return absl::InternalError(why);
  }
  struct stat st {};
  std::string text;
  absl::Status status;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    status = absl::InvalidArgumentError(absl::StrCat(named, " is not a regular file; pass a file"));
  } else if (st.st_size == 0) {
    status = absl::InvalidArgumentError(absl::StrCat(named, " is empty (0 bytes)"));
  } else if (static_cast<uint64_t>(st.st_size) > kPemFileBytesMax) {
    status = absl::InvalidArgumentError(absl::StrCat(named, " is ", st.st_size,
                                                     " bytes, more than any PEM file this reads (",
                                                     kPemFileBytesMax, "); is it the right file?"));
  } else {
    text.resize(static_cast<size_t>(st.st_size));
    const ssize_t n = pread(fd, text.data(), text.size(), 0);
    if (n < 0) {
      status = absl::InternalError(absl::StrCat(named, " cannot be read: ", std::strerror(errno)));
    }
    text.resize(n < 0 ? 0 : static_cast<size_t>(n));
  }
  close(fd);
  if (!status.ok()) return status;
  return text;
}

absl::StatusOr<CertificateSummary> ParseCertificates(absl::string_view pem) {
  InitOpenSsl();
  ERR_clear_error();
  Bio bio = MemoryBio(pem);
  CertificateSummary summary;
  int count = 0;
  while (true) {
    Certificate cert(PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr));
    if (cert == nullptr) break;
    if (count == 0) summary = Summarise(cert.get());
    ++count;
  }
  if (!AtEndOfPem()) {
    return absl::InvalidArgumentError(
        absl::StrCat(count == 0 ? "the certificate" : absl::StrCat("certificate ", count + 1),
                     " does not parse: ", OpenSslReason()));
  }
  ERR_clear_error();
  if (count == 0) {
    return absl::InvalidArgumentError("holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
  }
  summary.count = count;
  return summary;
}

absl::Status ParsePrivateKey(absl::string_view pem) { return ReadKey(pem).status(); }

absl::Status CheckKeyMatchesCertificate(absl::string_view key_pem, absl::string_view cert_pem) {
  absl::StatusOr<PrivateKey> key = ReadKey(key_pem);
  if (!key.ok()) return key.status();
  absl::StatusOr<Certificate> cert = ReadFirstCertificate(cert_pem);
  if (!cert.ok()) return cert.status();
  if (X509_check_private_key(cert->get(), key->get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "the private key does not belong to the certificate (", SubjectText(cert->get()), ")"));
  }
  return absl::OkStatus();
}

absl::Status FileIsNot(const absl::Status& reason, absl::string_view path, absl::string_view role,
                       absl::string_view what, absl::string_view fix) {
  return absl::Status(reason.code(), absl::StrCat("'", path, "' (", role, ") is not ", what, ": ",
                                                  reason.message(), "; ", fix));
}

absl::Status CheckKeyFile(absl::string_view key_path, absl::string_view key_pem,
                          absl::string_view cert_path, absl::string_view cert_pem,
                          absl::string_view role) {
  constexpr absl::string_view kFix = "pass the key that matches --tls-cert";
  if (absl::Status key = ParsePrivateKey(key_pem); !key.ok()) {
    return FileIsNot(key, key_path, role, "a PEM private key", kFix);
  }
  if (absl::Status match = CheckKeyMatchesCertificate(key_pem, cert_pem); !match.ok()) {
    return FileIsNot(match, key_path, role, absl::StrCat("the key of '", cert_path, "'"), kFix);
  }
  return absl::OkStatus();
}

}  // namespace ipupod::tls
