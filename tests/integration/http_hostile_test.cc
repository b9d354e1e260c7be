// The HTTP listener of a real ipupodd under hostile input: garbage bytes, an
// over-long request line and headers, a TLS handshake on the plain port,
// crowds of silent connections from one client and floods beyond its
// connection limits. gRPC keeps answering throughout, and so do /metrics and
// /healthz for every client the limits leave room for; the server never
// crashes. And a metrics port in use is exit 2 at start.
//
// Every address of 127.0.0.0/8 is this host's on Linux: 127.0.0.1 is the
// hostile client, 127.0.0.2 and up are others (the listener's per-address
// limit is 64 connections, its total 256; server/http/http_listener.h).
#include <atomic>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/integration/harness.h"
#include "tests/support/http_client.h"
#include <unistd.h>

namespace ipupod::testing {
namespace {

using std::chrono::seconds;
using test_support::ClosedWithin;
using test_support::ConnectLoopback;
using test_support::HttpGet;
using test_support::HttpOptions;
using test_support::SendRaw;

constexpr int kPerAddress = 64;  // HttpListenerOptions' defaults, as ipupodd uses them
constexpr int kTotal = 256;

int PortOf(const std::string& url) {
  int port = 0;
  EXPECT_TRUE(absl::SimpleAtoi(url.substr(url.rfind(':') + 1), &port)) << url;
  return port;
}

HttpOptions From(const std::string& source, absl::Duration timeout = absl::Seconds(20)) {
  HttpOptions options = test_support::WithSource(source);
  options.timeout = timeout;
  return options;
}

std::vector<int> Silent(int port, int count, const std::string& source) {
  std::vector<int> fds;
  for (int i = 0; i < count; ++i) fds.push_back(ConnectLoopback(port, source));
  return fds;
}

void CloseAll(std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
  fds.clear();
}

void SendGarbage(int port) {
  std::mt19937 random(42);
  for (int i = 0; i < 20; ++i) {
    std::string garbage(random() % 8192, '\0');
    for (char& c : garbage) c = static_cast<char>(random());
    SendRaw(port, garbage, absl::Seconds(6));
  }
  std::string long_line = "GET /";  // appended, not concatenated: GCC 12 -O3 -Warray-bounds
  long_line.append(100000, 'a');
  long_line.append(" HTTP/1.1\r\n\r\n");
  EXPECT_EQ(SendRaw(port, long_line, absl::Seconds(6)).find(" 200 "), std::string::npos);
  std::string headers = "GET /healthz HTTP/1.1\r\n";
  for (int i = 0; i < 1000; ++i) {
    headers.append("X-Filler: ");
    headers.append(100, 'f');
    headers.append("\r\n");
  }
  EXPECT_EQ(SendRaw(port, headers + "\r\n", absl::Seconds(6)).find(" 200 "), std::string::npos);
  SendRaw(port, std::string("\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", 11), absl::Seconds(6));
}

TEST(HttpHostileTest, GarbageLeavesItServing) {
  ServerUnderTest server;
  const std::string url = server.metrics_url();
  ASSERT_FALSE(url.empty());
  SendGarbage(PortOf(url));
  EXPECT_EQ(HttpGet(url + "/healthz").status, 200);
  EXPECT_EQ(RunCli(server.address(), "alice", {"--json", "info"}).exit_code, 0);
  EXPECT_TRUE(server.process().Running()) << server.process().stderr_text();
}

// One client holds its whole allowance with silent connections: the others'
// scrapes are served at once (civetweb's thread per connection answered 0
// of 64 here), its own further connections are refused at once, and gRPC
// never notices.
TEST(HttpHostileTest, ASilentCrowdFromOneClientDelaysNoOtherClient) {
  ServerUnderTest server;
  const std::string url = server.metrics_url();
  ASSERT_FALSE(url.empty());
  const int port = PortOf(url);
  std::vector<int> silent = Silent(port, kPerAddress, "127.0.0.1");
  ASSERT_EQ(HttpGet(url + "/healthz", From("127.0.0.2")).status, 200);  // all accepted by now
  const absl::Time start = absl::Now();
  const test_support::HttpResult scrape = HttpGet(url + "/metrics", From("127.0.0.2"));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(scrape.status, 200) << scrape.error;
  EXPECT_NE(scrape.body.find("ipupod_pod_ipus 16"), std::string::npos);
  EXPECT_LT(took, absl::Seconds(2));
  std::atomic<int> answered{0};
  std::vector<std::thread> busy;
  for (int i = 0; i < 16; ++i) {
    busy.emplace_back([&] {
      for (int j = 0; j < 4; ++j) {
        answered += HttpGet(url + "/metrics", From("127.0.0.3", absl::Seconds(2))).status == 200;
      }
    });
  }
  int refused = 0;  // the flood beyond its allowance
  std::vector<int> flood = Silent(port, 200, "127.0.0.1");
  for (int fd : flood) refused += ClosedWithin(fd, absl::Seconds(2));
  CloseAll(flood);
  EXPECT_EQ(refused, 200);
  CliResult info = RunCli(server.address(), "alice", {"--json", "info"});
  EXPECT_EQ(info.exit_code, 0) << "gRPC must not wait for the HTTP crowd: " << info.err;
  for (std::thread& t : busy) t.join();
  EXPECT_EQ(answered.load(), 64);
  for (int fd : silent) EXPECT_FALSE(ClosedWithin(fd, absl::ZeroDuration()));  // still held
  CloseAll(silent);
  EXPECT_TRUE(Eventually([&] { return HttpGet(url + "/healthz").status == 200; }, seconds(30)));
  EXPECT_TRUE(server.process().Running()) << server.process().stderr_text();
  std::printf(
      "with %d silent connections from one client: a scrape from another took %s, %d of 64 "
      "concurrent scrapes answered within 2 s, %d of 200 more connections from it refused\n",
      kPerAddress, absl::FormatDuration(took).c_str(), answered.load(), refused);
}

// Many clients together reach the total: new connections wait for a free
// one (the kernel's backlog) instead of failing, gRPC is not affected, and
// HTTP serves everyone again as soon as the flood is gone.
TEST(HttpHostileTest, AFloodOverTheTotalLimitLeavesGrpcAnswering) {
  ServerUnderTest server;
  const std::string url = server.metrics_url();
  ASSERT_FALSE(url.empty());
  const int port = PortOf(url);
  std::vector<int> flood;
  for (int client = 4; client < 4 + kTotal / kPerAddress + 1; ++client) {
    std::vector<int> more = Silent(port, kPerAddress, absl::StrCat("127.0.0.", client));
    flood.insert(flood.end(), more.begin(), more.end());
  }
  EXPECT_TRUE(Eventually(
      [&] { return HttpGet(url + "/healthz", From("127.0.0.2", absl::Seconds(1))).status == 0; },
      seconds(30)))
      << "the listener should be full with " << flood.size() << " connections";
  CliResult info = RunCli(server.address(), "alice", {"--json", "info"});
  EXPECT_EQ(info.exit_code, 0) << "gRPC must not wait for the HTTP flood: " << info.err;
  CloseAll(flood);
  const absl::Time start = absl::Now();
  EXPECT_TRUE(Eventually([&] { return HttpGet(url + "/healthz").status == 200; }, seconds(30)));
  EXPECT_EQ(HttpGet(url + "/metrics", From("127.0.0.2")).status, 200);
  EXPECT_TRUE(server.process().Running()) << server.process().stderr_text();
  std::printf("%zu connections from 5 clients filled the listener; served again %s after\n",
              static_cast<size_t>(kTotal / kPerAddress + 1) * kPerAddress,
              absl::FormatDuration(absl::Now() - start).c_str());
}

// A metrics port in use stops ipupodd at start: exit 2, saying which
// address and what to do.
TEST(HttpHostileTest, AMetricsPortInUseIsExitTwoWithTheReason) {
  ServerUnderTest server;
  const std::string taken = server.metrics_url().substr(std::string("http://").size());
  TempDir state;
  Process second = Process::Start({ServerBinary(), "--listen", "127.0.0.1:0", "--state-dir",
                                   state.path(), "--metrics-listen", taken});
  EXPECT_EQ(second.Wait(seconds(30)), 2);
  EXPECT_NE(second.stderr_text().find("the metrics listener (metrics_listen '" + taken),
            std::string::npos)
      << second.stderr_text();
  EXPECT_NE(second.stderr_text().find("Address already in use"), std::string::npos);
  EXPECT_NE(second.stderr_text().find("--metrics-listen"), std::string::npos);
}

}  // namespace
}  // namespace ipupod::testing
