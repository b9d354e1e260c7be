// ipupodd's HTTP listener in a real PodServer: /metrics and /healthz, the
// identity rules, the ready line, a metrics port in use, "off", and the RPC
// counts the interceptor keeps.
#include <set>
#include <string>

#include <gmock/gmock.h>
#include <google/protobuf/descriptor.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ipupod/v1/pod.grpc.pb.h"
#include "server/rpc_metrics_interceptor.h"
#include "server/server.h"
#include "tests/support/eventually.h"
#include "tests/support/exposition.h"
#include "tests/support/http_client.h"
#include "tests/support/test_server.h"

namespace ipupod::server {
namespace {

using test_support::HttpGet;
using test_support::HttpResult;
using test_support::SampleValue;
using test_support::TestServer;
using ::testing::HasSubstr;

std::unique_ptr<TestServer> MustStart(test_support::ConfigAdjust adjust = nullptr) {
  auto server = TestServer::Start(std::move(adjust));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

grpc::Status GetPodInfo(const std::string& address, const std::string& user) {
  auto stub =
      v1::PodService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(15));
  if (!user.empty()) context.AddMetadata("x-ipupod-user", user);
  v1::GetPodInfoResponse response;
  return stub->GetPodInfo(&context, {}, &response);
}

TEST(MetricsEndpointTest, ServesMetricsAndHealthAndSaysWhereInTheReadyLine) {
  auto server = MustStart();
  ASSERT_NE(server, nullptr);
  const std::string url = server->server().metrics_url();
  ASSERT_THAT(url, HasSubstr("http://127.0.0.1:"));
  EXPECT_FALSE(absl::EndsWith(url, ":0"));
  EXPECT_TRUE(absl::EndsWith(
      server->server().ReadyLine(),
      absl::StrCat("open mode); ", url, " serves the status page, /metrics and /healthz")))
      << server->server().ReadyLine();
  HttpResult health = HttpGet(url + "/healthz");
  EXPECT_EQ(health.status, 200) << health.error;
  EXPECT_EQ(health.body, "ok\n");
  HttpResult metrics = HttpGet(url + "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_TRUE(metrics.HasHeader("Content-Type: text/plain; version=0.0.4")) << metrics.headers;
  EXPECT_EQ(SampleValue(metrics.body, "ipupod_pod_ipus"), 16);
  EXPECT_EQ(SampleValue(metrics.body, R"(ipupod_jobs{state="pending"})"), 0);
  EXPECT_EQ(SampleValue(metrics.body, "ipupod_executable_cache_limit_bytes"), 4096.0 * (1 << 20));
}

TEST(MetricsEndpointTest, CountsRpcsByMethodAndCode) {
  auto server = MustStart();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(GetPodInfo(server->address(), "alice").ok());
  ASSERT_TRUE(GetPodInfo(server->address(), "alice").ok());
  EXPECT_EQ(GetPodInfo(server->address(), "").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  const std::string text = HttpGet(server->server().metrics_url() + "/metrics").body;
  const std::string info = R"(method="GetPodInfo",service="ipupod.v1.PodService"})";
  EXPECT_EQ(SampleValue(text, absl::StrCat(R"(ipupod_rpcs_total{code="OK",)", info)), 2) << text;
  EXPECT_EQ(SampleValue(text, absl::StrCat(R"(ipupod_rpcs_total{code="UNAUTHENTICATED",)", info)),
            1);
  EXPECT_EQ(SampleValue(text, absl::StrCat("ipupod_rpc_duration_seconds_count{", info)), 3);
}

TEST(MetricsEndpointTest, WithTokensMetricsNeedOneAndHealthDoesNot) {
  auto server = MustStart([](ServerConfig& config) {
    config.tokens = {{"alice-secret", "alice", false}, {"ops-secret", "ops", true}};
  });
  ASSERT_NE(server, nullptr);
  const std::string url = server->server().metrics_url();
  HttpResult none = HttpGet(url + "/metrics");
  EXPECT_EQ(none.status, 401);
  EXPECT_TRUE(none.HasHeader("WWW-Authenticate: Basic realm=\"ipupod\"")) << none.headers;
  EXPECT_EQ(HttpGet(url + "/metrics", test_support::WithBearer("alice-secre")).status, 401);
  EXPECT_EQ(HttpGet(url + "/metrics", test_support::WithBearer("alice-secret")).status, 200);
  EXPECT_EQ(HttpGet(url + "/metrics", test_support::WithBasic("me", "ops-secret")).status, 200);
  EXPECT_EQ(HttpGet(url + "/healthz").status, 200);
}

TEST(MetricsEndpointTest, OffServesNoHttp) {
  auto server = MustStart([](ServerConfig& config) { config.metrics_listen = "off"; });
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->server().metrics_url(), "");
  EXPECT_THAT(server->server().ReadyLine(), ::testing::EndsWith("open mode)"));
}

TEST(MetricsEndpointTest, AMetricsPortInUseIsAClearStartError) {
  auto first = MustStart();
  ASSERT_NE(first, nullptr);
  const std::string taken = first->server().metrics_url().substr(std::string("http://").size());
  auto second = TestServer::Start([&](ServerConfig& config) { config.metrics_listen = taken; });
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("metrics listener"));
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("Address already in use"));
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("--metrics-listen"));
  EXPECT_EQ(HttpGet(first->server().metrics_url() + "/healthz").status, 200);
}

TEST(MetricsEndpointTest, ServesOnIpv6Loopback) {
  if (!test_support::HasIpv6Loopback()) GTEST_SKIP() << "this host has no IPv6 loopback (::1)";
  auto server = MustStart([](ServerConfig& config) { config.metrics_listen = "[::1]:0"; });
  ASSERT_NE(server, nullptr);
  const std::string url = server->server().metrics_url();
  EXPECT_THAT(url, ::testing::StartsWith("http://[::1]:"));
  EXPECT_EQ(HttpGet(url + "/healthz").status, 200);
  EXPECT_THAT(HttpGet(url + "/metrics").body, HasSubstr("ipupod_pod_ipus 16"));
}

// Every method of every service the proto files define is named in the
// metrics; a new service added to proto/ipupod/v1 must be added to the list.
TEST(KnownRpcMethodsTest, NameEveryMethodOfEveryIpupodService) {
  const std::vector<std::string> known = KnownRpcMethods();
  const std::set<std::string> names(known.begin(), known.end());
  const google::protobuf::DescriptorPool* pool = google::protobuf::DescriptorPool::generated_pool();
  int services = 0;
  for (const char* file :
       {"ipupod/v1/pod.proto", "ipupod/v1/execution.proto", "ipupod/v1/jobs.proto",
        "ipupod/v1/accounting.proto", "ipupod/v1/compile.proto"}) {
    const google::protobuf::FileDescriptor* descriptor = pool->FindFileByName(file);
    ASSERT_NE(descriptor, nullptr) << file;
    for (int s = 0; s < descriptor->service_count(); ++s, ++services) {
      const google::protobuf::ServiceDescriptor* service = descriptor->service(s);
      for (int m = 0; m < service->method_count(); ++m) {
        EXPECT_TRUE(names.contains(
            absl::StrCat("/", service->full_name(), "/", service->method(m)->name())))
            << service->full_name() << "/" << service->method(m)->name();
      }
    }
  }
  EXPECT_EQ(services, 7);
  EXPECT_TRUE(names.contains("/grpc.health.v1.Health/Check"));
}

}  // namespace
}  // namespace ipupod::server
