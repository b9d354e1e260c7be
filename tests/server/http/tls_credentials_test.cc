#include "server/http/tls_credentials.h"

#include <cstdlib>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/http_client.h"
#include "tests/support/python_cases.h"

namespace ipupod::http {
namespace {

using test_support::MakeSelfSignedCertificate;
using test_support::TempDir;
using ::testing::HasSubstr;

TEST(TlsCredentialsTest, AGeneratedCertificateAndItsKeyPass) {
  TempDir dir;
  auto made = MakeSelfSignedCertificate(dir, "server");
  if (!made) GTEST_SKIP() << "the openssl CLI is not installed (Debian package openssl)";
  EXPECT_TRUE(CheckTlsCredentials(made->cert_pem, made->key_pem).ok());
  // A chain: the server's certificate first, then another (an intermediate's place).
  auto other = MakeSelfSignedCertificate(dir, "other");
  ASSERT_TRUE(other);
  EXPECT_TRUE(CheckTlsCredentials(made->cert_pem + other->cert_pem, made->key_pem).ok());
}

TEST(TlsCredentialsTest, BadPemIsAClearInvalidArgument) {
  TempDir dir;
  auto a = MakeSelfSignedCertificate(dir, "a");
  auto b = MakeSelfSignedCertificate(dir, "b");
  if (!a || !b) GTEST_SKIP() << "the openssl CLI is not installed (Debian package openssl)";
  absl::Status garbage = CheckTlsCredentials("not a certificate", a->key_pem);
  EXPECT_EQ(garbage.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(garbage.message(), HasSubstr("is not a PEM certificate"));
  EXPECT_THAT(CheckTlsCredentials(a->key_pem, a->key_pem).message(),
              HasSubstr("is not a PEM certificate"));
  EXPECT_THAT(CheckTlsCredentials(a->cert_pem, a->cert_pem).message(),
              HasSubstr("is not an unencrypted PEM private key"));
  absl::Status mismatched = CheckTlsCredentials(a->cert_pem, b->key_pem);
  EXPECT_EQ(mismatched.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mismatched.message(), HasSubstr("does not belong to the certificate"));
  // The key of a certificate that comes second does not count: the first is the server's.
  EXPECT_THAT(CheckTlsCredentials(b->cert_pem + a->cert_pem, a->key_pem).message(),
              HasSubstr("does not belong to the certificate"));
  EXPECT_THAT(CheckTlsCredentials("", a->key_pem).message(), HasSubstr("empty"));
  EXPECT_THAT(CheckTlsCredentials(a->cert_pem, "").message(), HasSubstr("empty"));
  const std::string huge(kPemBytesMax + 1, 'x');
  EXPECT_THAT(CheckTlsCredentials(huge, a->key_pem).message(), HasSubstr("the right file"));
  const std::string with_nul = a->cert_pem + std::string(1, '\0') + "x";
  EXPECT_THAT(CheckTlsCredentials(with_nul, a->key_pem).message(), HasSubstr("NUL byte"));
}

TEST(TlsCredentialsTest, AnEncryptedKeyIsRefusedWithoutAPrompt) {
  TempDir dir;
  auto a = MakeSelfSignedCertificate(dir, "a");
  if (!a) GTEST_SKIP() << "the openssl CLI is not installed (Debian package openssl)";
  const std::string encrypted = dir.sub("encrypted.key");
  const std::string command = "openssl pkey -in '" + a->key_path +
                              "' -aes256 -passout pass:pw -out '" + encrypted + "' >/dev/null 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0);
  absl::Status refused = CheckTlsCredentials(a->cert_pem, test_support::ReadTextFile(encrypted));
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("is not an unencrypted PEM private key"));
}

}  // namespace
}  // namespace ipupod::http
