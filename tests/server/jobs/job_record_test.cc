// jobs::JobRecord as the store keeps it (strict JSON): what accounting added
// round-trips, and a record written before it existed still reads, with
// the defaults.
#include <string>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/jobs/job.h"

namespace ipupod::jobs {
namespace {

using ::testing::HasSubstr;

JobRecord Record() {
  JobRecord r;
  r.id = "12.1";
  r.user = "alice";
  r.admin = true;
  r.spec.executable_sha256 = std::string(64, 'a');
  r.spec.account = "vision";
  r.spec.qos = "scavenger";
  r.submitted_unix_ms = 1000;
  r.first_started_unix_ms = 2000;
  r.started_unix_ms = 3000;
  r.state = JobState::kCompleted;
  r.ipu_seconds = 12.5;
  return r;
}

TEST(JobRecordJsonTest, AccountQosAdminAndFirstStartRoundTrip) {
  absl::StatusOr<JobRecord> back = JobRecordFromJson(ToJson(Record()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->spec.account, "vision");
  EXPECT_EQ(back->spec.qos, "scavenger");
  EXPECT_TRUE(back->admin);
  EXPECT_EQ(back->first_started_unix_ms, 2000);
  EXPECT_EQ(back->started_unix_ms, 3000);
  EXPECT_DOUBLE_EQ(back->ipu_seconds, 12.5);
}

TEST(JobRecordJsonTest, ARecordFromBeforeAccountingReadsWithTheDefaults) {
  nlohmann::json doc = nlohmann::json::parse(ToJson(Record()));
  doc["spec"].erase("account");
  doc["spec"].erase("qos");
  doc.erase("admin");
  doc.erase("first_started_unix_ms");
  const std::string json = doc.dump();
  ASSERT_THAT(json, ::testing::Not(HasSubstr("account")));
  ASSERT_THAT(json, ::testing::Not(HasSubstr("admin")));
  absl::StatusOr<JobRecord> old = JobRecordFromJson(json);
  ASSERT_TRUE(old.ok()) << old.status() << "\n" << json;
  EXPECT_EQ(old->spec.account, "");
  EXPECT_EQ(old->spec.qos, "");
  EXPECT_FALSE(old->admin);
  EXPECT_EQ(old->first_started_unix_ms, 0);
}

TEST(JobRecordJsonTest, WrongTypesAreRefusedNamingTheKey) {
  std::string json =
      absl::StrReplaceAll(ToJson(Record()), {{R"("qos":"scavenger")", R"("qos":3)"}});
  absl::StatusOr<JobRecord> bad = JobRecordFromJson(json);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("qos"));
  json = absl::StrReplaceAll(ToJson(Record()), {{R"("admin":true)", R"("admin":"yes")"}});
  EXPECT_EQ(JobRecordFromJson(json).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ipupod::jobs
