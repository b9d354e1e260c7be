#include "http/http_listener.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/support/http_client.h"
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace ipupod::http {
namespace {

using test_support::HttpGet;
using test_support::HttpOptions;
using test_support::HttpResult;
using test_support::TempDir;
using test_support::WithBasic;
using test_support::WithBearer;
using test_support::WithCa;
using test_support::WithMethod;
using test_support::WithTimeout;
using ::testing::HasSubstr;

constexpr absl::string_view kToken = "s3cret-token";

HttpResponse Hello(const HttpRequest& request) {
  return {200, "text/plain; charset=utf-8", absl::StrCat("hello ", request.user, "\n")};
}

HttpListenerOptions Options() {
  HttpListenerOptions options;
  options.routes.push_back({"/hello", Hello});
  options.routes.push_back({"/healthz",
                            [](const HttpRequest&) {
                              return HttpResponse{200, "text/plain", "ok\n"};
                            },
                            true});
  return options;
}

std::unique_ptr<HttpListener> Start(HttpListenerOptions options) {
  auto listener = HttpListener::Start(std::move(options));
  EXPECT_TRUE(listener.ok()) << listener.status();
  return listener.ok() ? *std::move(listener) : nullptr;
}

std::string Url(const HttpListener& listener, absl::string_view path) {
  return absl::StrCat(listener.url(), path);
}

TEST(HttpListenerTest, ServesRoutesWithStatusTypeAndBody) {
  auto listener = Start(Options());
  ASSERT_NE(listener, nullptr);
  EXPECT_GT(listener->port(), 0);
  EXPECT_EQ(listener->url(), absl::StrCat("http://127.0.0.1:", listener->port()));
  HttpResult get = HttpGet(Url(*listener, "/hello?x=1"));
  EXPECT_EQ(get.status, 200) << get.error;
  EXPECT_EQ(get.body, "hello \n");
  EXPECT_TRUE(get.HasHeader("Content-Type: text/plain; charset=utf-8")) << get.headers;
  EXPECT_TRUE(get.HasHeader("Cache-Control: no-store")) << get.headers;
  HttpResult head = HttpGet(Url(*listener, "/hello"), WithMethod("HEAD"));
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.body, "");
  EXPECT_TRUE(head.HasHeader("Content-Length: 7")) << head.headers;
}

TEST(HttpListenerTest, UnknownPathIs404AndOtherMethodsAre405) {
  auto listener = Start(Options());
  ASSERT_NE(listener, nullptr);
  HttpResult missing = HttpGet(Url(*listener, "/nope"));
  EXPECT_EQ(missing.status, 404);
  EXPECT_THAT(missing.body, HasSubstr("/hello, /healthz"));
  // No file is served, whatever the path says.
  EXPECT_EQ(HttpGet(Url(*listener, "/../../etc/passwd")).status, 404);
  EXPECT_EQ(HttpGet(Url(*listener, "/")).status, 404);
  for (const char* method : {"POST", "PUT", "DELETE", "OPTIONS", "PATCH"}) {
    HttpResult refused = HttpGet(Url(*listener, "/hello"), WithMethod(method));
    EXPECT_EQ(refused.status, 405) << method;
    EXPECT_TRUE(refused.HasHeader("Allow: GET, HEAD")) << refused.headers;
  }
}

TEST(HttpListenerTest, TokenModeAsksForBearerOrBasicCredentials) {
  HttpListenerOptions options = Options();
  options.check_token = [](absl::string_view token) -> std::optional<std::string> {
    if (token == kToken) return std::string("alice");
    return std::nullopt;
  };
  auto listener = Start(std::move(options));
  ASSERT_NE(listener, nullptr);
  const std::string url = Url(*listener, "/hello");
  HttpResult none = HttpGet(url);
  EXPECT_EQ(none.status, 401);
  EXPECT_TRUE(none.HasHeader("WWW-Authenticate: Basic realm=\"ipupod\"")) << none.headers;
  HttpResult wrong = HttpGet(url, WithBearer("wrong"));
  EXPECT_EQ(wrong.status, 401);
  EXPECT_EQ(wrong.body, none.body);  // nothing tells a wrong token from none
  HttpResult bearer = HttpGet(url, WithBearer(std::string(kToken)));
  EXPECT_EQ(bearer.status, 200);
  EXPECT_EQ(bearer.body, "hello alice\n");
  HttpResult basic = HttpGet(url, WithBasic("anyone", std::string(kToken)));
  EXPECT_EQ(basic.status, 200);
  EXPECT_EQ(HttpGet(url, WithBasic("alice", "nope")).status, 401);
  // Liveness needs nothing; an unknown path says nothing without credentials.
  EXPECT_EQ(HttpGet(Url(*listener, "/healthz")).status, 200);
  EXPECT_EQ(HttpGet(Url(*listener, "/secret-page")).status, 401);
  EXPECT_EQ(HttpGet(Url(*listener, "/secret-page"), WithBearer(std::string(kToken))).status, 404);
}

TEST(HttpListenerTest, AHandlerThatThrowsIsA500) {
  HttpListenerOptions options;
  options.routes.push_back(
      {"/boom", [](const HttpRequest&) -> HttpResponse { throw std::runtime_error("boom"); }});
  auto listener = Start(std::move(options));
  ASSERT_NE(listener, nullptr);
  EXPECT_EQ(HttpGet(Url(*listener, "/boom")).status, 500);
  EXPECT_EQ(HttpGet(Url(*listener, "/boom")).status, 500);  // and it goes on serving
}

TEST(HttpListenerTest, ARequestOverTheSizeBoundIsRefused) {
  HttpListenerOptions options = Options();
  options.max_request_bytes = 4096;
  auto listener = Start(std::move(options));
  ASSERT_NE(listener, nullptr);
  const std::string line = "GET /" + std::string(20000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string reply = test_support::SendRaw(listener->port(), line);
  EXPECT_TRUE(reply.empty() || reply.find(" 200 ") == std::string::npos) << reply.substr(0, 200);
  std::string headers = "GET /hello HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 200; ++i)
    headers += absl::StrCat("X-Pad-", i, ": ", std::string(40, 'p'), "\r\n");
  const std::string big = test_support::SendRaw(listener->port(), headers + "\r\n");
  EXPECT_TRUE(big.empty() || big.find(" 200 ") == std::string::npos) << big.substr(0, 200);
  EXPECT_EQ(HttpGet(Url(*listener, "/hello")).status, 200);
}

// Clients that connect and send nothing, or one byte at a time, hold a
// worker each only until the request timeout.
TEST(HttpListenerTest, StalledClientsDelayOthersAtMostTheTimeout) {
  HttpListenerOptions options = Options();
  options.worker_threads = 2;
  options.request_timeout = absl::Seconds(1);
  auto listener = Start(std::move(options));
  ASSERT_NE(listener, nullptr);
  const int silent_a = test_support::ConnectLoopback(listener->port());
  const int silent_b = test_support::ConnectLoopback(listener->port());
  ASSERT_GE(silent_a, 0);
  ASSERT_GE(silent_b, 0);
  std::atomic<bool> stop{false};
  std::thread slowloris([&] {  // a byte every 200 ms, never a whole request
    const int fd = test_support::ConnectLoopback(listener->port());
    const std::string request =
        "GET /hello HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(200, 's');
    for (size_t i = 0; i < request.size() && !stop.load(); ++i) {
      if (::send(fd, &request[i], 1, MSG_NOSIGNAL) != 1) break;
      absl::SleepFor(absl::Milliseconds(200));
    }
    ::close(fd);
  });
  absl::SleepFor(absl::Milliseconds(100));  // let them take the workers first
  const absl::Time start = absl::Now();
  HttpResult waited = HttpGet(Url(*listener, "/hello"));
  const absl::Duration took = absl::Now() - start;
  stop.store(true);
  slowloris.join();
  ::close(silent_a);
  ::close(silent_b);
  EXPECT_EQ(waited.status, 200) << waited.error;
  // Three stalled clients on two workers: at most two rounds of the timeout.
  EXPECT_LT(took, absl::Seconds(4)) << "a request waited " << took;
  std::printf("a request behind 3 stalled clients (2 workers, 1 s timeout) took %s\n",
              absl::FormatDuration(took).c_str());
}

TEST(HttpListenerTest, HostileBytesAndManyConnectionsLeaveItServing) {
  auto listener = Start(Options());
  ASSERT_NE(listener, nullptr);
  std::string garbage;
  for (int i = 0; i < 3000; ++i) garbage.push_back(static_cast<char>((i * 131) & 0xff));
  test_support::SendRaw(listener->port(), garbage, absl::Seconds(6));
  test_support::SendRaw(listener->port(), "\r\n\r\n\r\n", absl::Seconds(6));
  test_support::SendRaw(listener->port(), "GET\r\n\r\n", absl::Seconds(6));
  test_support::SendRaw(listener->port(), "GET /hello HTTP/9.9\r\n\r\n", absl::Seconds(6));
  test_support::SendRaw(listener->port(), "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
                        absl::Seconds(6));
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int i = 0; i < 32; ++i) {
    clients.emplace_back([&] {
      for (int j = 0; j < 5; ++j) ok += HttpGet(Url(*listener, "/healthz")).status == 200;
    });
  }
  for (std::thread& client : clients) client.join();
  EXPECT_EQ(ok.load(), 32 * 5);
  EXPECT_EQ(HttpGet(Url(*listener, "/hello")).status, 200);
}

TEST(HttpListenerTest, StopReturnsWhileAClientStalls) {
  HttpListenerOptions options = Options();
  options.request_timeout = absl::Seconds(30);
  auto listener = Start(std::move(options));
  ASSERT_NE(listener, nullptr);
  const int stalled = test_support::ConnectLoopback(listener->port());
  absl::SleepFor(absl::Milliseconds(100));
  const absl::Time start = absl::Now();
  listener->Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  ::close(stalled);
  EXPECT_EQ(HttpGet(Url(*listener, "/hello"), WithTimeout(absl::Seconds(2))).status, 0);
}

TEST(HttpListenerTest, APortInUseOrABadHostIsAClearError) {
  auto first = Start(Options());
  ASSERT_NE(first, nullptr);
  HttpListenerOptions same = Options();
  same.port = first->port();
  auto in_use = HttpListener::Start(std::move(same));
  EXPECT_EQ(in_use.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(in_use.status().message(), HasSubstr("Address already in use"));
  EXPECT_THAT(in_use.status().message(), HasSubstr(absl::StrCat("127.0.0.1:", first->port())));
  HttpListenerOptions foreign = Options();
  foreign.host = "192.0.2.1";  // TEST-NET-1: no address of this host
  EXPECT_EQ(HttpListener::Start(std::move(foreign)).status().code(),
            absl::StatusCode::kUnavailable);
  for (const char* host : {"::1", "example.com", "127.0.0.1:80", ""}) {
    HttpListenerOptions bad = Options();
    bad.host = host;
    auto refused = HttpListener::Start(std::move(bad));
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << host;
    EXPECT_THAT(refused.status().message(), HasSubstr("IPv4 address or localhost")) << host;
  }
  HttpListenerOptions twice = Options();
  twice.routes.push_back({"/hello", Hello});
  EXPECT_EQ(HttpListener::Start(std::move(twice)).status().code(),
            absl::StatusCode::kInvalidArgument);
  HttpListenerOptions half_tls = Options();
  half_tls.cert_pem = "x";
  EXPECT_EQ(HttpListener::Start(std::move(half_tls)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpGet(Url(*first, "/hello")).status, 200);
}

TEST(HttpListenerTest, HttpsServesWithAGeneratedCertificate) {
  TempDir dir;
  auto made = test_support::MakeSelfSignedCertificate(dir, "server");
  if (!made) GTEST_SKIP() << "the openssl CLI is not installed (Debian package openssl)";
  HttpListenerOptions options = Options();
  options.cert_pem = made->cert_pem;
  options.key_pem = made->key_pem;
  options.host = "localhost";
  auto listener = Start(std::move(options));
  ASSERT_NE(listener, nullptr);
  EXPECT_TRUE(listener->https());
  const std::string url = absl::StrCat("https://localhost:", listener->port(), "/hello");
  EXPECT_EQ(listener->url(), absl::StrCat("https://127.0.0.1:", listener->port()));
  for (int i = 0; i < 3; ++i) {  // the handshake, and the request after it, each time
    HttpResult verified = HttpGet(url, WithCa(made->cert_path));
    EXPECT_EQ(verified.status, 200) << verified.error;
    EXPECT_EQ(verified.body, "hello \n");
  }
  HttpResult unknown_ca = HttpGet(url);  // the system's CAs do not know it
  EXPECT_EQ(unknown_ca.status, 0);
  EXPECT_THAT(unknown_ca.error, HasSubstr("certificate"));
  HttpResult plain = HttpGet(absl::StrCat("http://127.0.0.1:", listener->port(), "/hello"),
                             WithTimeout(absl::Seconds(5)));
  EXPECT_NE(plain.status, 200);
  EXPECT_EQ(HttpGet(url, WithCa(made->cert_path)).status, 200);  // still serving
}

// civetweb opens OpenSSL by the names "libssl.so" and "libcrypto.so": in
// this process they are http/civetweb_openssl3's, which add the function
// OpenSSL 3 dropped (see the README there).
TEST(HttpListenerTest, CivetwebFindsTheOpenSsl3CompatLibraries) {
  auto listener = Start(Options());
  ASSERT_NE(listener, nullptr);
  void* ssl = ::dlopen("libssl.so", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(ssl, nullptr) << "libssl.so is not loaded under that name";
  EXPECT_NE(::dlsym(ssl, "SSL_get_peer_certificate"), nullptr);
  EXPECT_NE(::dlsym(ssl, "ipupod_civetweb_libssl_compat"), nullptr);
  EXPECT_NE(::dlsym(ssl, "SSL_CTX_new"), nullptr);  // the real libssl.so.3's, through it
  void* crypto = ::dlopen("libcrypto.so", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(crypto, nullptr);
  EXPECT_NE(::dlsym(crypto, "ipupod_civetweb_libcrypto_compat"), nullptr);
  ::dlclose(ssl);
  ::dlclose(crypto);
}

}  // namespace
}  // namespace ipupod::http
