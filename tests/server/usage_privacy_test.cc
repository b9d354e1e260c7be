// Usage is private unless accounting_public (docs/accounting.md, "Who sees
// what"), on every surface it leaves the server by: with alice's token alice
// sees her own usage and not bob's on /metrics, in GetShares, GetUsage,
// ListHistory and /status.json; the admin sees everyone's; and with
// accounting_public so does alice.
#include <chrono>
#include <memory>
#include <string>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "ipupod/v1/accounting.grpc.pb.h"
#include "ipupod/v1/pod.grpc.pb.h"
#include "tests/support/eventually.h"
#include "tests/support/http_client.h"
#include "tests/support/test_server.h"

namespace ipupod::server {
namespace {

using test_support::HttpGet;
using test_support::WithBearer;
using ::testing::HasSubstr;
using ::testing::Not;

class UsagePrivacyTest : public ::testing::TestWithParam<bool> {
 protected:
  bool Public() const { return GetParam(); }

  void SetUp() override {
    auto server = test_support::TestServer::Start([this](ServerConfig& config) {
      config.tokens = {{"alice-secret", "alice", false},
                       {"bob-secret", "bob", false},
                       {"ops-secret", "ops", true}};
      config.accounting_public = Public();
    });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
    // alice and bob each hold IPUs once: a record, a share row and a series each.
    UseIpus("alice-secret");
    UseIpus("bob-secret");
    ASSERT_TRUE(test_support::Eventually([&] { return History("ops-secret").size() == 2; }));
  }

  std::unique_ptr<grpc::ClientContext> As(const std::string& token) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->AddMetadata("authorization", "Bearer " + token);
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return context;
  }

  // A Hold of one IPU, granted and released.
  void UseIpus(const std::string& token) {
    auto context = As(token);
    auto stream = v1::SessionService::NewStub(channel_)->Hold(context.get());
    v1::AttachRequest request;
    request.set_num_ipus(1);
    ASSERT_TRUE(stream->Write(request));
    v1::AttachEvent event;
    ASSERT_TRUE(stream->Read(&event));
    ASSERT_TRUE(event.has_granted()) << event.DebugString();
    stream->WritesDone();
    while (stream->Read(&event)) {
    }
    ASSERT_TRUE(stream->Finish().ok());
  }

  // The users of the records `token` may list.
  std::vector<std::string> History(const std::string& token) {
    v1::ListHistoryResponse response;
    auto context = As(token);
    const grpc::Status status =
        v1::AccountingService::NewStub(channel_)->ListHistory(context.get(), {}, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    std::vector<std::string> users;
    for (const v1::UsageRecord& r : response.records()) users.push_back(r.user());
    return users;
  }

  std::vector<std::string> Shares(const std::string& token) {
    v1::GetSharesResponse response;
    auto context = As(token);
    const grpc::Status status =
        v1::SessionService::NewStub(channel_)->GetShares(context.get(), {}, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    std::vector<std::string> accounts;
    for (const v1::AccountShare& a : response.accounts()) accounts.push_back(a.account());
    return accounts;
  }

  grpc::Status Usage(const std::string& token, const std::string& user,
                     v1::GetUsageResponse* response) {
    v1::GetUsageRequest request;
    request.set_user(user);
    auto context = As(token);
    return v1::AccountingService::NewStub(channel_)->GetUsage(context.get(), request, response);
  }

  std::vector<std::string> UsageUsers(const std::string& token) {
    v1::GetUsageResponse response;
    const grpc::Status status = Usage(token, "", &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    std::vector<std::string> users;
    for (const v1::UsageGroup& g : response.groups()) users.push_back(g.key());
    return users;
  }

  std::string Metrics(const std::string& token) {
    return HttpGet(server_->server().metrics_url() + "/metrics", WithBearer(token)).body;
  }

  std::vector<std::string> StatusUsers(const std::string& token) {
    const auto document = nlohmann::json::parse(
        HttpGet(server_->server().metrics_url() + "/status.json", WithBearer(token)).body);
    std::vector<std::string> users;
    for (const auto& row : document["usage"]["by_user"]["rows"]) users.push_back(row["user"]);
    return users;
  }

  std::unique_ptr<test_support::TestServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_P(UsagePrivacyTest, AUserSeesTheirOwnUsageAndAnAdminEveryones) {
  using ::testing::UnorderedElementsAre;
  const auto both = UnorderedElementsAre("alice", "bob");
  const std::string alice_series = R"(ipupod_ipu_seconds_total{account="alice",user="alice"})";
  const std::string bob_series = R"(ipupod_ipu_seconds_total{account="bob",user="bob"})";

  EXPECT_THAT(Metrics("ops-secret"), AllOf(HasSubstr(alice_series), HasSubstr(bob_series)));
  EXPECT_THAT(Metrics("alice-secret"), HasSubstr(alice_series));
  if (Public()) {
    EXPECT_THAT(Metrics("alice-secret"), HasSubstr(bob_series));
  } else {
    EXPECT_THAT(Metrics("alice-secret"), Not(HasSubstr("bob")));
  }

  EXPECT_THAT(Shares("ops-secret"), both);
  if (Public()) {
    EXPECT_THAT(Shares("alice-secret"), both);
    EXPECT_THAT(History("alice-secret"), both);
    EXPECT_THAT(UsageUsers("alice-secret"), both);
    EXPECT_THAT(StatusUsers("alice-secret"), both);
    return;
  }
  EXPECT_THAT(Shares("alice-secret"), UnorderedElementsAre("alice"));
  EXPECT_THAT(History("alice-secret"), UnorderedElementsAre("alice"));
  EXPECT_THAT(UsageUsers("alice-secret"), UnorderedElementsAre("alice"));
  v1::GetUsageResponse response;
  EXPECT_EQ(Usage("alice-secret", "bob", &response).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(StatusUsers("alice-secret"), UnorderedElementsAre("alice"));
  EXPECT_THAT(StatusUsers("ops-secret"), both);
}

INSTANTIATE_TEST_SUITE_P(AccountingPublic, UsagePrivacyTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return param.param ? "Public" : "Private";
                         });

}  // namespace
}  // namespace ipupod::server
