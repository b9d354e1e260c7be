#include "server/tls_files.h"

#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/python_cases.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certificates.h"

namespace ipupod::server {
namespace {

using test_support::ReadTextFile;
using test_support::TempDir;
using test_support::TestCertificates;
using ::testing::HasSubstr;

class TlsFilesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    certs_ = new TestCertificates(dir_->path());
  }
  static void TearDownTestSuite() {
    delete certs_;
    delete dir_;
  }
  static TlsFiles Good() { return {certs_->server_cert, certs_->server_key, ""}; }
  static std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_->sub(name);
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  // The message of LoadTlsMaterial(files), which must fail with `code`.
  static std::string Failure(const TlsFiles& files, absl::StatusCode code) {
    absl::StatusOr<TlsMaterial> material = LoadTlsMaterial(files);
    EXPECT_EQ(material.status().code(), code) << material.status();
    return std::string(material.status().message());
  }

  static TempDir* dir_;
  static TestCertificates* certs_;
};
TempDir* TlsFilesTest::dir_ = nullptr;
TestCertificates* TlsFilesTest::certs_ = nullptr;

TEST_F(TlsFilesTest, WithoutTlsThereIsNoMaterial) {
  absl::StatusOr<TlsMaterial> material = LoadTlsMaterial({});
  ASSERT_TRUE(material.ok()) << material.status();
  EXPECT_FALSE(material->enabled());
  EXPECT_EQ(material->cert_pem, "");
  EXPECT_NE(GrpcServerCredentials(*material), nullptr);
}

TEST_F(TlsFilesTest, GoodFilesComeBackAsTheirPemTexts) {
  absl::StatusOr<TlsMaterial> material = LoadTlsMaterial(Good());
  ASSERT_TRUE(material.ok()) << material.status();
  EXPECT_TRUE(material->enabled());
  EXPECT_EQ(material->cert_pem, ReadTextFile(certs_->server_cert));
  EXPECT_EQ(material->key_pem, ReadTextFile(certs_->server_key));
  EXPECT_EQ(material->client_ca_pem, "");
  EXPECT_THAT(material->summary, HasSubstr("CN = server"));
  EXPECT_THAT(material->summary, HasSubstr("no client certificates"));
  EXPECT_NE(GrpcServerCredentials(*material), nullptr);

  TlsFiles mutual = Good();
  mutual.client_ca = certs_->ca;
  absl::StatusOr<TlsMaterial> with_ca = LoadTlsMaterial(mutual);
  ASSERT_TRUE(with_ca.ok()) << with_ca.status();
  EXPECT_EQ(with_ca->client_ca_pem, ReadTextFile(certs_->ca));
  EXPECT_THAT(with_ca->summary, HasSubstr("client certificates required"));
}

TEST_F(TlsFilesTest, UnreadableFilesNameTheFileAndTheFlag) {
  TlsFiles missing = Good();
  missing.cert = dir_->sub("missing.pem");
  std::string message = Failure(missing, absl::StatusCode::kNotFound);
  EXPECT_THAT(message, HasSubstr("missing.pem' does not exist"));
  EXPECT_THAT(message, HasSubstr("--tls-cert"));

  TlsFiles directory = Good();
  directory.key = dir_->path();
  message = Failure(directory, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("--tls-key"));
  EXPECT_THAT(message, HasSubstr("not a regular file"));

  TlsFiles no_ca = Good();
  no_ca.client_ca = dir_->sub("no-ca.pem");
  message = Failure(no_ca, absl::StatusCode::kNotFound);
  EXPECT_THAT(message, HasSubstr("--tls-client-ca"));
  EXPECT_THAT(message, HasSubstr("no-ca.pem"));
}

TEST_F(TlsFilesTest, MalformedFilesSayWhatIsWrongAndWhatToDo) {
  TlsFiles garbage = Good();
  garbage.cert = Write("garbage.pem", "this is not a certificate\n");
  std::string message = Failure(garbage, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("'" + garbage.cert +
                                 "' (tls.cert, --tls-cert) is not a PEM "
                                 "certificate: holds no PEM certificate"));
  EXPECT_THAT(message, HasSubstr("pass the server's certificate"));

  TlsFiles swapped = Good();  // the key where the certificate goes, and the reverse
  swapped.cert = certs_->server_key;
  swapped.key = certs_->server_cert;
  EXPECT_THAT(Failure(swapped, absl::StatusCode::kInvalidArgument),
              HasSubstr("is not a PEM certificate"));

  TlsFiles not_a_key = Good();
  not_a_key.key = certs_->server_cert;
  message = Failure(not_a_key, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("'" + certs_->server_cert +
                                 "' (tls.key, --tls-key) is not a PEM private key"));
  EXPECT_THAT(message, HasSubstr("pass the key that matches --tls-cert"));

  TlsFiles encrypted = Good();
  encrypted.key = certs_->encrypted_key;
  EXPECT_THAT(Failure(encrypted, absl::StatusCode::kInvalidArgument),
              HasSubstr("openssl pkey -in KEY -out KEY.plain"));

  TlsFiles bad_ca = Good();
  bad_ca.client_ca = certs_->client_key;
  EXPECT_THAT(Failure(bad_ca, absl::StatusCode::kInvalidArgument),
              HasSubstr("(tls.client_ca, --tls-client-ca) is not a PEM CA bundle"));
}

TEST_F(TlsFilesTest, TheKeyMustMatchTheCertificate) {
  TlsFiles mismatched = Good();
  mismatched.key = certs_->client_key;
  const std::string message = Failure(mismatched, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("is not the key of '" + certs_->server_cert + "'"));
  EXPECT_THAT(message, HasSubstr("does not belong to the certificate"));
  EXPECT_THAT(message, HasSubstr("pass the key that matches --tls-cert"));
}

TEST_F(TlsFilesTest, AnExpiredCertificateNamesItsNotAfter) {
  const TlsFiles expired = {certs_->expired_cert, certs_->expired_key, ""};
  const std::string message = Failure(expired, absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(message, HasSubstr("expired: its notAfter is "));
  EXPECT_THAT(message, HasSubstr("GMT"));
  EXPECT_THAT(message, HasSubstr("renew it"));
}

}  // namespace
}  // namespace ipupod::server
