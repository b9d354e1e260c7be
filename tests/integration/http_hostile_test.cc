// The HTTP listener of a real ipupodd under hostile input: garbage bytes, an
// over-long request line and headers, a TLS handshake on the plain port,
// crowds of silent and of busy connections. gRPC keeps answering
// throughout, and /healthz and /metrics answer again once the crowd is gone;
// the server never crashes. And a metrics port in use is exit 2 at start.
#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "tests/integration/harness.h"
#include "tests/support/http_client.h"
#include <unistd.h>

namespace ipupod::testing {
namespace {

using std::chrono::seconds;
using test_support::HttpGet;
using test_support::SendRaw;

int PortOf(const std::string& url) {
  int port = 0;
  EXPECT_TRUE(absl::SimpleAtoi(url.substr(url.rfind(':') + 1), &port)) << url;
  return port;
}

TEST(HttpHostileTest, GarbageAndCrowdsLeaveGrpcAndHealthAnswering) {
  ServerUnderTest server;
  const std::string url = server.metrics_url();
  ASSERT_FALSE(url.empty());
  const int port = PortOf(url);
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

  // A crowd: silent connections holding every worker, and busy clients.
  std::vector<int> silent;
  for (int i = 0; i < 64; ++i) silent.push_back(test_support::ConnectLoopback(port));
  std::atomic<int> answered{0};
  std::vector<std::thread> busy;
  for (int i = 0; i < 16; ++i) {
    busy.emplace_back([&] {
      for (int j = 0; j < 4; ++j) {
        answered +=
            HttpGet(url + "/metrics", test_support::WithTimeout(absl::Seconds(2))).status == 200;
      }
    });
  }
  CliResult info = RunCli(server.address(), "alice", {"--json", "info"});
  EXPECT_EQ(info.exit_code, 0) << "gRPC must not wait for the HTTP crowd: " << info.err;
  for (std::thread& t : busy) t.join();
  for (int fd : silent) ::close(fd);

  EXPECT_TRUE(Eventually([&] { return HttpGet(url + "/healthz").status == 200; }, seconds(60)));
  const test_support::HttpResult metrics = HttpGet(url + "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("ipupod_pod_ipus 16"), std::string::npos);
  EXPECT_EQ(RunCli(server.address(), "alice", {"--json", "info"}).exit_code, 0);
  EXPECT_TRUE(server.process().Running()) << server.process().stderr_text();
  std::printf("%d of 64 scrapes behind 64 silent connections answered within 2 s\n",
              answered.load());
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
