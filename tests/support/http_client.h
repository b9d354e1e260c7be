// File: tests/support/http_client.h
//
// HTTP for tests (libcurl): one request, its status, headers and body; and
// a self-signed certificate for localhost and 127.0.0.1 made with the
// openssl CLI, for tests of HTTPS. Linked by the tests that need it
// (ipupod_test_http), not by every test.
//
// Thread safety: HttpGet may run on several threads at once.
// Errors: a transport failure (refused, TLS verification, timeout) is
// status 0 with curl's message in `error`.
#ifndef IPUPOD_TESTS_SUPPORT_HTTP_CLIENT_H_
#define IPUPOD_TESTS_SUPPORT_HTTP_CLIENT_H_

#include <optional>
#include <string>

#include "absl/time/time.h"
#include "tests/support/temp_dir.h"

namespace ipupod::test_support {

struct HttpOptions {
  std::string method = "GET";  // GET, HEAD, POST, PUT, ...
  std::string bearer;          // sent as `Authorization: Bearer ...`
  std::string basic_user;      // with basic_password: HTTP Basic
  std::string basic_password;
  std::string ca_file;  // trust only this CA (curl --cacert); "" = the system's
  std::string source;   // connect from this local address (e.g. "127.0.0.2"); "" = any
  absl::Duration timeout = absl::Seconds(20);
};

struct HttpResult {
  long status = 0;  // 0: no HTTP answer (see error)
  std::string headers;
  std::string body;
  std::string error;
  // Whether a header line "Name: value..." starts with `line` (case-insensitive name).
  bool HasHeader(const std::string& line) const;
};

HttpResult HttpGet(const std::string& url, const HttpOptions& options = {});

// HttpOptions with one setting changed.
HttpOptions WithMethod(std::string method);
HttpOptions WithBearer(std::string token);
HttpOptions WithBasic(std::string user, std::string password);
HttpOptions WithCa(std::string ca_file);
HttpOptions WithTimeout(absl::Duration timeout);
HttpOptions WithSource(std::string source);

// A TCP connection to 127.0.0.1:port, from `source` when given (any address
// of 127.0.0.0/8 is this host's on Linux: a second "client" for tests of
// per-address limits); -1 when refused.
int ConnectLoopback(int port, const std::string& source = "");
// Whether this host has an IPv6 loopback (::1) to bind; containers may not.
bool HasIpv6Loopback();
// Whether the peer closes (or resets) connection `fd` within `timeout`;
// what arrives before is read and dropped.
bool ClosedWithin(int fd, absl::Duration timeout);
// Sends `bytes` on a new connection to 127.0.0.1:port and reads until the
// server closes it or `timeout` passes; what it read.
std::string SendRaw(int port, const std::string& bytes, absl::Duration timeout = absl::Seconds(10));

struct TestCertificate {
  std::string cert_path;
  std::string key_path;
  std::string cert_pem;
  std::string key_pem;
};

// A self-signed certificate for localhost and 127.0.0.1 (files `name`.pem and
// `name`.key in `dir`); nullopt when the openssl CLI is missing or fails.
std::optional<TestCertificate> MakeSelfSignedCertificate(const TempDir& dir,
                                                         const std::string& name);

}  // namespace ipupod::test_support

#endif  // IPUPOD_TESTS_SUPPORT_HTTP_CLIENT_H_
