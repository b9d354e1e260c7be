// No user can flush the audit log (server/audit_trail.h, server/store/sqlite_audit.h),
// through a real PodServer in open mode: one plain user refused thousands of
// times leaves one record and one summary with the count; hundreds of user
// names refused once each (what open mode lets one person be) fill the cap,
// and the purge at the next start evicts their refusals, not the admin's
// fault.inject made before them.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "ipupod/v1/audit.grpc.pb.h"
#include "ipupod/v1/pod.grpc.pb.h"
#include "tests/support/test_server.h"

namespace ipupod::server {
namespace {

constexpr int kRefusals = 3000;
constexpr int kNames = 300;
constexpr int kCap = 50;

class AuditFloodTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = test_support::TestServer::Start([](ServerConfig& config) {
      config.audit_max_records = kCap;
      config.audit_refusal_window_seconds = 3600;  // the whole flood is one window
    });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    Connect();
  }
  void Connect() {
    auto channel = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
    pod_ = v1::PodService::NewStub(channel);
    audit_ = v1::AuditService::NewStub(channel);
  }

  grpc::Status Inject(const std::string& user) {
    grpc::ClientContext context;
    context.AddMetadata("x-ipupod-user", user);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::InjectFaultRequest request;
    request.set_ipu(0);
    request.set_kind(v1::FAULT_KIND_IPU_RESET);
    v1::InjectFaultResponse response;
    return pod_->InjectFault(&context, request, &response);
  }

  // Every record the admin may list, oldest first.
  std::vector<v1::AuditRecord> All() {
    std::vector<v1::AuditRecord> records;
    std::string token;
    do {
      grpc::ClientContext context;
      context.AddMetadata("x-ipupod-user", "admin");
      v1::ListAuditRequest request;
      request.set_limit(1000);
      request.set_page_token(token);
      v1::ListAuditResponse response;
      const grpc::Status status = audit_->ListAudit(&context, request, &response);
      EXPECT_TRUE(status.ok()) << status.error_message();
      records.insert(records.end(), response.records().begin(), response.records().end());
      token = response.next_page_token();
    } while (!token.empty());
    return records;
  }

  std::unique_ptr<test_support::TestServer> server_;
  std::unique_ptr<v1::PodService::Stub> pod_;
  std::unique_ptr<v1::AuditService::Stub> audit_;
};

// The count a summary's details start with ("refused=N ..."); 0 for a record.
int64_t Refused(const v1::AuditRecord& r) {
  absl::string_view details = r.details();
  int64_t n = 0;
  if (!absl::ConsumePrefix(&details, "refused=")) return 0;
  EXPECT_TRUE(absl::SimpleAtoi(details.substr(0, details.find(' ')), &n)) << r.details();
  return n;
}

TEST_F(AuditFloodTest, RefusalsAreSummarisedAndNeverEvictAnAdminsRecord) {
  ASSERT_TRUE(Inject("admin").ok());
  for (int i = 0; i < kNames; ++i) {
    ASSERT_EQ(Inject(absl::StrCat("mallory", i)).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  for (int i = 0; i < kRefusals; ++i) {
    ASSERT_EQ(Inject("mallory").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  // The restart ends every window (summaries at the stop) and purges to the cap.
  ASSERT_TRUE(server_->Restart().ok());
  Connect();
  const std::vector<v1::AuditRecord> kept = All();
  ASSERT_LE(kept.size(), static_cast<size_t>(kCap) + 1);  // + the new start's record
  int admin_faults = 0;
  int mallory_records = 0;
  int64_t mallory_refusals = 0;
  for (const v1::AuditRecord& r : kept) {
    admin_faults += r.user() == "admin" && r.action() == "fault.inject" && r.code() == "OK";
    if (r.user() != "mallory") continue;
    ++mallory_records;
    mallory_refusals += Refused(r) > 0 ? Refused(r) : 1;  // a summary counts N, a record 1
  }
  EXPECT_EQ(admin_faults, 1) << "the admin's fault.inject was evicted by refusals";
  // mallory's record and the summary written at the stop are the newest
  // refusals, which the purge keeps (it took the oldest names' first).
  EXPECT_EQ(mallory_records, 2);
  EXPECT_EQ(mallory_refusals, kRefusals);
}

}  // namespace
}  // namespace ipupod::server
