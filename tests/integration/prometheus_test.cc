// Debian's real Prometheus scrapes a real ipupodd (token mode: the scrape
// config's bearer credentials) every second while the CLI drives work - an
// attach holding IPUs, a partition, an injected fault, a refused call, a
// small model run with weights - and the values the server should have are
// read back through Prometheus' HTTP query API. A second scrape job with a
// wrong token must find the target down.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/tensor/tensor_files.h"
#include "tests/integration/harness.h"
#include "tests/support/http_client.h"
#include "tests/support/models.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace ipupod::testing {
namespace {

using std::chrono::seconds;
using test_support::HttpGet;

constexpr const char* kPrometheus = "/usr/bin/prometheus";
constexpr const char* kAliceToken = "alice-metrics-token";
constexpr const char* kOpsToken = "ops-metrics-token";

// A port nobody listens on now (Prometheus takes it right after).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
  ::close(fd);
  return ntohs(address.sin_port);
}

std::string UrlEncode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      char escaped[4];
      std::snprintf(escaped, sizeof escaped, "%%%02X", c);
      out += escaped;
    }
  }
  return out;
}

std::string ServerConfig() {
  return absl::StrCat(R"({"tokens": [{"token": ")", kAliceToken,
                      R"(", "user": "alice"}, {"token": ")", kOpsToken,
                      R"(", "user": "ops", "role": "admin"}]})");
}

class PrometheusTest : public ::testing::Test {
 protected:
  PrometheusTest() : server_({"--pod", "POD16"}, ServerConfig()) {}
  ~PrometheusTest() override {
    if (prometheus_) {
      prometheus_->Signal(SIGTERM);
      if (!prometheus_->Wait(seconds(20))) prometheus_->Signal(SIGKILL);
    }
  }

  // Prometheus scraping the server every second, with alice's token and,
  // as a second job, with a wrong one.
  void StartPrometheus() {
    const std::string target = server_.metrics_url().substr(std::string("http://").size());
    const std::string config = dir_.sub("prometheus.yml");
    std::ofstream(config) << "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                          << "scrape_configs:\n"
                          << "  - job_name: ipupod\n"
                          << "    scrape_timeout: 1s\n"
                          << "    authorization: {credentials: " << kAliceToken << "}\n"
                          << "    static_configs: [{targets: ['" << target << "']}]\n"
                          << "  - job_name: ipupod-wrong-token\n"
                          << "    scrape_timeout: 1s\n"
                          << "    authorization: {credentials: not-a-token}\n"
                          << "    static_configs: [{targets: ['" << target << "']}]\n";
    prometheus_url_ = absl::StrCat("http://127.0.0.1:", FreePort());
    prometheus_.emplace(Process::Start(
        {kPrometheus, "--config.file=" + config, "--storage.tsdb.path=" + dir_.sub("tsdb"),
         "--web.listen-address=" + prometheus_url_.substr(7), "--log.level=warn"}));
    ASSERT_TRUE(Eventually([&] { return HttpGet(prometheus_url_ + "/-/ready").status == 200; },
                           seconds(90)))
        << "Prometheus did not become ready: " << prometheus_->stderr_text();
  }

  // The one sample of an instant query, or nullopt (none yet).
  std::optional<double> Query(const std::string& promql) {
    const test_support::HttpResult r =
        HttpGet(prometheus_url_ + "/api/v1/query?query=" + UrlEncode(promql));
    if (r.status != 200) return std::nullopt;
    const nlohmann::json doc = nlohmann::json::parse(r.body, nullptr, false);
    if (doc.is_discarded() || !doc.contains("data")) return std::nullopt;
    const nlohmann::json& result = doc["data"]["result"];
    if (!result.is_array() || result.size() != 1) return std::nullopt;
    return std::stod(result[0]["value"][1].get<std::string>());
  }
  // Polls Prometheus until `promql` reads `want` (scrapes are 1 s apart).
  void ExpectEventually(const std::string& promql, double want) {
    std::optional<double> last;
    EXPECT_TRUE(Eventually(
        [&] {
          last = Query(promql);
          return last == want;
        },
        seconds(90)))
        << promql << " is " << (last ? std::to_string(*last) : "absent") << ", not " << want;
  }
  CliResult Cli(const char* token, std::vector<std::string> args) {
    args.insert(args.begin(), {"--json", "--token", token});
    return RunCli(server_.address(), "alice", args);
  }
  int IdleIpuOutsidePartitions() {
    const nlohmann::json info = Cli(kAliceToken, {"info"}).json();
    for (const nlohmann::json& ipu : info["ipus"]) {
      if (ipu["state"] == "idle" && ipu.value("partition", "").empty()) return ipu["id"];
    }
    return -1;
  }

  TempDir dir_;
  ServerUnderTest server_;
  std::optional<Process> prometheus_;
  std::string prometheus_url_;
};

TEST_F(PrometheusTest, ARealPrometheusSeesWhatTheServerDid) {
  if (!std::filesystem::exists(kPrometheus)) {
    GTEST_SKIP() << kPrometheus << " is not installed (Debian package prometheus)";
  }
  ASSERT_FALSE(server_.metrics_url().empty());
  StartPrometheus();

  // An attach holding 2 IPUs, a partition, a refused duplicate, an injected fault.
  Process holder = StartCli(server_.address(), "alice",
                            {"--json", "--token", kAliceToken, "attach", "--ipus", "2"});
  ASSERT_TRUE(holder.ReadStdoutJson(seconds(30))) << holder.stderr_text();
  ASSERT_EQ(Cli(kAliceToken, {"partition", "create", "exp", "--size", "4"}).exit_code, 0);
  ASSERT_NE(Cli(kAliceToken, {"partition", "create", "exp", "--size", "4"}).exit_code, 0);
  const int ipu = IdleIpuOutsidePartitions();
  ASSERT_GE(ipu, 0);
  CliResult fault =
      Cli(kOpsToken, {"fault", "inject", "--ipu", std::to_string(ipu), "--kind", "ipu-reset"});
  ASSERT_EQ(fault.exit_code, 0) << fault.err;

  ExpectEventually(R"(up{job="ipupod"})", 1);
  ExpectEventually(R"(ipupod_ipus{state="attached"})", 2);
  ExpectEventually("ipupod_partitions", 1);
  ExpectEventually(R"(ipupod_ipus{state="error"})", 1);
  ExpectEventually(R"(ipupod_faults_total{kind="ipu-reset",origin="injected"})", 1);
  ExpectEventually(
      R"(ipupod_rpcs_total{service="ipupod.v1.PartitionService",method="CreatePartition",code="OK"})",
      1);
  ExpectEventually(
      R"(ipupod_rpcs_total{service="ipupod.v1.PartitionService",method="CreatePartition",code="ALREADY_EXISTS"})",
      1);
  ExpectEventually(
      R"(ipupod_rpcs_total{service="ipupod.v1.PodService",method="InjectFault",code="OK"})", 1);
  ExpectEventually(R"(up{job="ipupod-wrong-token"})", 0);  // 401: Prometheus marks it down

  // A small model: compiled offline, run with weights (2 steps of 2 samples).
  const std::string model = dir_.sub("regressor.onnx");
  std::ofstream(model, std::ios::binary)
      << test_support::RegressorModel(2, {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f});
  ASSERT_EQ(Cli(kAliceToken, {"compile", model, "-o", dir_.sub("m.ipx")}).exit_code, 0);
  auto floats = [](tensor::Shape shape, int n) {
    return *tensor::Tensor::FromValues<float>(std::move(shape), std::vector<float>(n, 0.5f));
  };
  std::ofstream(dir_.sub("in.npz"), std::ios::binary)
      << tensor::SerializeNpz({{"x", floats({4, 3}, 12)}, {"t", floats({4, 2}, 8)}});
  std::ofstream(dir_.sub("w.npz"), std::ios::binary)
      << tensor::SerializeNpz({{"W", floats({3, 2}, 6)}, {"bias", floats({2}, 2)}});
  CliResult run =
      Cli(kAliceToken, {"run", dir_.sub("m.ipx"), "--inputs", dir_.sub("in.npz"), "--outputs",
                        dir_.sub("out.npz"), "--weights", dir_.sub("w.npz")});
  ASSERT_EQ(run.exit_code, 0) << run.err;

  ExpectEventually("ipupod_loads_total", 1);
  ExpectEventually("ipupod_runs_total", 2);
  ExpectEventually("ipupod_run_input_bytes_total", 2 * (2 * 3 + 2 * 2) * 4);
  ExpectEventually("ipupod_weight_bytes_written_total", (3 * 2 + 2) * 4);
  ExpectEventually("ipupod_run_device_seconds_total > bool 0", 1);
  ExpectEventually(R"(ipupod_grants_total{kind="interactive"})", 2);  // the holder, the run

  holder.Signal(SIGINT);
  ASSERT_EQ(holder.Wait(seconds(15)), 0);
  ExpectEventually(R"(ipupod_ipus{state="attached"})", 0);
  ExpectEventually(R"(ipupod_sessions_ended_total{state="released"})", 2);
  ExpectEventually(R"(ipupod_ipu_seconds_total{account="alice",user="alice"} > bool 0)", 1);
}

}  // namespace
}  // namespace ipupod::testing
