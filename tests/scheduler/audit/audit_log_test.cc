// scheduler/audit/audit_log.h: the fixed list of actions, the bounds every record is
// cut to (a hostile request cannot make a large or malformed row), and the
// checks of records and queries.
#include "scheduler/audit/audit_log.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ipupod::audit {
namespace {

using ::testing::HasSubstr;

AuditRecord Record() {
  AuditRecord r;
  r.time_unix_ms = 1'800'000'000'000;
  r.user = "alice";
  r.peer = "ipv4:127.0.0.1:40000";
  r.action = std::string(kFaultInject);
  r.target = "ipu 3";
  r.code = "OK";
  return r;
}

TEST(AuditLogTest, TheActionsAreTheFixedList) {
  EXPECT_EQ(Actions().size(), 12u);
  EXPECT_TRUE(IsAction("pod.reset"));
  EXPECT_TRUE(IsAction("job.cancel.other"));
  EXPECT_FALSE(IsAction("pod.rest"));
  const absl::Status bad = CheckAction("pod.rest");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("did you mean 'pod.reset'"));
  EXPECT_THAT(bad.message(), HasSubstr("server.stop"));
}

TEST(AuditLogTest, BoundedCutsEveryTextFieldAndRepairsUtf8) {
  AuditRecord r = Record();
  r.user = std::string(1000, 'u');
  r.target = "partition " + std::string(100000, 'p');
  r.details = std::string(5000, 'd');
  r.message = "bad \xFF bytes " + std::string(5000, 'm');
  r.peer = std::string(300, 'x');
  EXPECT_FALSE(CheckRecord(r).ok());
  const AuditRecord b = Bounded(r);
  EXPECT_TRUE(CheckRecord(b).ok()) << CheckRecord(b);
  EXPECT_EQ(b.user.size(), kNameBytesMax);
  EXPECT_EQ(b.target.size(), kTargetBytesMax);
  EXPECT_EQ(b.details.size(), kTextBytesMax);
  EXPECT_LE(b.message.size(), kTextBytesMax);
  EXPECT_THAT(b.message, HasSubstr("bad \xEF\xBF\xBD bytes"));
  EXPECT_EQ(b.target.substr(b.target.size() - 3), "...");
}

TEST(AuditLogTest, CheckRecordRefusesUnknownActionsAndMissingResults) {
  AuditRecord r = Record();
  EXPECT_TRUE(CheckRecord(r).ok());
  r.action = "rm -rf";
  EXPECT_EQ(CheckRecord(r).code(), absl::StatusCode::kInvalidArgument);
  r = Record();
  r.code.clear();
  EXPECT_THAT(CheckRecord(r).message(), HasSubstr("no result code"));
  r = Record();
  r.time_unix_ms = -1;
  EXPECT_EQ(CheckRecord(r).code(), absl::StatusCode::kInvalidArgument);
}

TEST(AuditLogTest, SetResultTakesTheCodeNameAndTheMessageOfAnError) {
  AuditRecord r = Record();
  SetResult(r, absl::PermissionDeniedError("only an admin injects faults"));
  EXPECT_EQ(r.code, "PERMISSION_DENIED");
  EXPECT_EQ(r.message, "only an admin injects faults");
  SetResult(r, absl::OkStatus());
  EXPECT_EQ(r.code, "OK");
  EXPECT_EQ(r.message, "");
}

TEST(AuditLogTest, CheckQueryRefusesBadWindowsActionsTokensAndLimits) {
  EXPECT_TRUE(CheckQuery(AuditQuery()).ok());
  AuditQuery q;
  q.since_unix_ms = 10;
  q.until_unix_ms = 10;
  EXPECT_THAT(CheckQuery(q).message(), HasSubstr("window is empty"));
  q = AuditQuery();
  q.action = "fault.injects";
  EXPECT_THAT(CheckQuery(q).message(), HasSubstr("fault.inject"));
  q = AuditQuery();
  q.after_seq = -1;
  EXPECT_EQ(CheckQuery(q).code(), absl::StatusCode::kInvalidArgument);
  q = AuditQuery();
  q.limit = kMaxQueryLimit + 1;
  EXPECT_THAT(CheckQuery(q).message(), HasSubstr("1 to 1000"));
  q.limit = 0;
  EXPECT_EQ(CheckQuery(q).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ipupod::audit
