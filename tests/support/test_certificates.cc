#include "tests/support/test_certificates.h"

#include <cstdlib>
#include <stdexcept>

#include "tests/support/python_cases.h"

#ifndef IPUPOD_TEST_SOURCE_DIR
#define IPUPOD_TEST_SOURCE_DIR "."
#endif

namespace ipupod::test_support {
namespace {

std::string ScriptPath() {
  const char* src = std::getenv("IPUPOD_SOURCE_DIR");
  return std::string(src != nullptr ? src : IPUPOD_TEST_SOURCE_DIR) +
         "/tests/support/make_test_certificates.sh";
}

}  // namespace

TestCertificates::TestCertificates(const std::string& dir) {
  const std::string log = dir + "/openssl.log";
  const std::string command = "sh '" + ScriptPath() + "' '" + dir + "' > '" + log + "' 2>&1";
  if (std::system(command.c_str()) != 0) {
    throw std::runtime_error("making the test certificates failed: " + ReadTextFile(log));
  }
  auto path = [&dir](const char* name) { return dir + "/" + name; };
  ca = path("ca.pem"), ca_key = path("ca.key");
  server_cert = path("server.pem"), server_key = path("server.key");
  server_dns_cert = path("server-dns.pem"), server_dns_key = path("server-dns.key");
  expired_cert = path("expired.pem"), expired_key = path("expired.key");
  client_cert = path("client.pem"), client_key = path("client.key");
  other_ca = path("other-ca.pem"), other_ca_key = path("other-ca.key");
  other_client_cert = path("other-client.pem"), other_client_key = path("other-client.key");
  encrypted_key = path("encrypted.key");
}

}  // namespace ipupod::test_support
