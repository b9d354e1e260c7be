#include "common/tls/pem.h"

#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/python_cases.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certificates.h"

namespace ipupod::tls {
namespace {

using test_support::ReadTextFile;
using test_support::TempDir;
using test_support::TestCertificates;
using ::testing::HasSubstr;

class PemTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    certs_ = new TestCertificates(dir_->path());
  }
  static void TearDownTestSuite() {
    delete certs_;
    delete dir_;
  }
  static std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_->sub(name);
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  static std::string Pem(const std::string& path) { return ReadTextFile(path); }

  static TempDir* dir_;
  static TestCertificates* certs_;
};
TempDir* PemTest::dir_ = nullptr;
TestCertificates* PemTest::certs_ = nullptr;

TEST_F(PemTest, ReadPemFileNamesTheRoleAndWhatIsWrong) {
  absl::StatusOr<std::string> good = ReadPemFile(certs_->ca, "--tls-ca file");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_THAT(*good, HasSubstr("-----BEGIN CERTIFICATE-----"));

  absl::Status missing = ReadPemFile(dir_->sub("nope.pem"), "--tls-ca file").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.message()), HasSubstr("--tls-ca file '"));
  EXPECT_THAT(std::string(missing.message()), HasSubstr("nope.pem' does not exist"));

  absl::Status directory = ReadPemFile(dir_->path(), "x").status();
  EXPECT_EQ(directory.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(directory.message()), HasSubstr("not a regular file"));

  absl::Status empty = ReadPemFile(Write("empty.pem", ""), "x").status();
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(empty.message()), HasSubstr("empty"));

  absl::Status huge =
      ReadPemFile(Write("huge.pem", std::string(kPemFileBytesMax + 1, 'x')), "x").status();
  EXPECT_EQ(huge.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(huge.message()), HasSubstr("more than any PEM file"));

  EXPECT_EQ(ReadPemFile("/dev/null", "x").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(PemTest, CertificatesAreCountedAndSummarised) {
  absl::StatusOr<CertificateSummary> server = ParseCertificates(Pem(certs_->server_cert));
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(server->count, 1);
  EXPECT_THAT(server->subject, HasSubstr("CN = server"));
  EXPECT_FALSE(server->expired);
  EXPECT_FALSE(server->not_yet_valid);
  EXPECT_GE(server->days_left, 1);
  EXPECT_THAT(server->not_after, HasSubstr("GMT"));

  // A chain (server, then its CA) and a key before the certificates.
  absl::StatusOr<CertificateSummary> chain =
      ParseCertificates(Pem(certs_->server_key) + Pem(certs_->server_cert) + Pem(certs_->ca));
  ASSERT_TRUE(chain.ok()) << chain.status();
  EXPECT_EQ(chain->count, 2);
  EXPECT_THAT(chain->subject, HasSubstr("CN = server")) << "the first certificate's";

  absl::StatusOr<CertificateSummary> expired = ParseCertificates(Pem(certs_->expired_cert));
  ASSERT_TRUE(expired.ok()) << expired.status();
  EXPECT_TRUE(expired->expired);
  EXPECT_LT(expired->days_left, 1);
}

TEST_F(PemTest, WhatIsNotACertificateSaysWhy) {
  absl::Status key = ParseCertificates(Pem(certs_->server_key)).status();
  EXPECT_EQ(key.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(key.message()), HasSubstr("holds no PEM certificate"));

  EXPECT_THAT(std::string(ParseCertificates("just some text\n").status().message()),
              HasSubstr("holds no PEM certificate"));

  const std::string garbage =
      "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n";
  absl::Status malformed = ParseCertificates(garbage).status();
  EXPECT_EQ(malformed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(malformed.message()), HasSubstr("the certificate does not parse: "));

  // A good certificate followed by a broken one: the second is named.
  absl::Status second = ParseCertificates(Pem(certs_->ca) + garbage).status();
  EXPECT_EQ(second.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(second.message()), HasSubstr("certificate 2 does not parse"));
}

TEST_F(PemTest, PrivateKeys) {
  EXPECT_TRUE(ParsePrivateKey(Pem(certs_->server_key)).ok());
  absl::Status cert = ParsePrivateKey(Pem(certs_->server_cert));
  EXPECT_EQ(cert.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(cert.message()), HasSubstr("holds no PEM private key"));
  absl::Status encrypted = ParsePrivateKey(Pem(certs_->encrypted_key));
  EXPECT_EQ(encrypted.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(encrypted.message()), HasSubstr("encrypted"));
  EXPECT_THAT(std::string(encrypted.message()), HasSubstr("openssl pkey"));
  const std::string garbage =
      "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n";
  absl::Status broken = ParsePrivateKey(garbage);
  EXPECT_EQ(broken.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(broken.message()), HasSubstr("the private key does not parse: "));
  EXPECT_TRUE(ParsePrivateKey(Pem(certs_->ca_key)).ok()) << "any key type";
}

TEST_F(PemTest, AKeyMustBelongToItsCertificate) {
  EXPECT_TRUE(CheckKeyMatchesCertificate(Pem(certs_->server_key), Pem(certs_->server_cert)).ok());
  absl::Status other =
      CheckKeyMatchesCertificate(Pem(certs_->client_key), Pem(certs_->server_cert));
  EXPECT_EQ(other.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(other.message()), HasSubstr("does not belong to the certificate"));
  EXPECT_THAT(std::string(other.message()), HasSubstr("CN = server"));
}

}  // namespace
}  // namespace ipupod::tls
