#include "http/tls_credentials.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/http_client.h"
#include "tests/support/python_cases.h"
#include <openssl/ssl.h>

namespace ipupod::http {
namespace {

using test_support::MakeSelfSignedCertificate;
using test_support::TempDir;
using ::testing::HasSubstr;

TEST(TlsCredentialsTest, AGeneratedCertificateAndItsKeyInstall) {
  TempDir dir;
  auto made = MakeSelfSignedCertificate(dir, "server");
  if (!made) GTEST_SKIP() << "the openssl CLI is not installed (Debian package openssl)";
  auto tls = TlsCredentials::FromPem(made->cert_pem, made->key_pem);
  ASSERT_TRUE(tls.ok()) << tls.status();
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  EXPECT_TRUE((*tls)->InstallIn(ctx).ok());
  EXPECT_EQ(SSL_CTX_get_min_proto_version(ctx), TLS1_2_VERSION);
  SSL_CTX_free(ctx);
}

TEST(TlsCredentialsTest, BadPemIsAClearInvalidArgument) {
  TempDir dir;
  auto a = MakeSelfSignedCertificate(dir, "a");
  auto b = MakeSelfSignedCertificate(dir, "b");
  if (!a || !b) GTEST_SKIP() << "the openssl CLI is not installed (Debian package openssl)";
  auto garbage = TlsCredentials::FromPem("not a certificate", a->key_pem);
  EXPECT_EQ(garbage.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(garbage.status().message(), HasSubstr("is not a PEM certificate"));
  auto key_as_cert = TlsCredentials::FromPem(a->key_pem, a->key_pem);
  EXPECT_THAT(key_as_cert.status().message(), HasSubstr("is not a PEM certificate"));
  auto cert_as_key = TlsCredentials::FromPem(a->cert_pem, a->cert_pem);
  EXPECT_THAT(cert_as_key.status().message(), HasSubstr("is not an unencrypted PEM private key"));
  auto mismatched = TlsCredentials::FromPem(a->cert_pem, b->key_pem);
  EXPECT_EQ(mismatched.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mismatched.status().message(), HasSubstr("does not belong to the certificate"));
  EXPECT_THAT(TlsCredentials::FromPem("", a->key_pem).status().message(), HasSubstr("empty"));
  const std::string huge(kPemBytesMax + 1, 'x');
  EXPECT_THAT(TlsCredentials::FromPem(huge, a->key_pem).status().message(),
              HasSubstr("the right file"));
}

TEST(TlsCredentialsTest, AnEncryptedKeyIsRefusedWithoutAPrompt) {
  TempDir dir;
  auto a = MakeSelfSignedCertificate(dir, "a");
  if (!a) GTEST_SKIP() << "the openssl CLI is not installed (Debian package openssl)";
  const std::string encrypted = dir.sub("encrypted.key");
  const std::string command = "openssl pkey -in '" + a->key_path +
                              "' -aes256 -passout pass:pw -out '" + encrypted + "' >/dev/null 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0);
  auto tls = TlsCredentials::FromPem(a->cert_pem, test_support::ReadTextFile(encrypted));
  EXPECT_EQ(tls.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ipupod::http
