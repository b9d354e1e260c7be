// accounting::UsageReport: windows clip records at their own rate, open
// records count to now, job sessions are not counted twice, days split at
// UTC midnight and add up to the total, and the bounds and parsers.
#include "scheduler/accounting/usage_report.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ipupod::accounting {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kHour = 3600 * 1000;
constexpr int64_t kDay = 24 * kHour;
constexpr int64_t kMidnight = 1'795'651'200'000;  // 2026-11-26 00:00:00 UTC

UsageRecord Session(const std::string& id, const std::string& user, int ipus, int64_t start,
                    int64_t end) {
  UsageRecord r;
  r.id = id;
  r.user = user;
  r.account = user == "carol" ? "speech" : "vision";
  r.qos = "normal";
  r.ipus = ipus;
  r.submit_unix_ms = start;
  r.start_unix_ms = start;
  r.end_unix_ms = end;
  r.ipu_seconds = end > 0 ? ipus * static_cast<double>(end - start) / 1000 : 0;
  r.state = end > 0 ? "RELEASED" : "RUNNING";
  return r;
}

UsageRecord Job(const std::string& id, int64_t start, int64_t end) {
  UsageRecord r = Session(id, "alice", 2, start, end);
  r.kind = RecordKind::kJob;
  r.state = "COMPLETED";
  return r;
}

TEST(UsageReportTest, ByAccountSumsClippedToTheWindow) {
  UsageReport report(UsageGroupBy::kAccount, kMidnight, kMidnight + kDay, kMidnight + 2 * kDay);
  // 4 IPUs, 2 h of which 1 h inside the window.
  ASSERT_TRUE(report.Add(Session("s1", "alice", 4, kMidnight - kHour, kMidnight + kHour)).ok());
  // 1 IPU for 3 h, inside.
  ASSERT_TRUE(report.Add(Session("s2", "carol", 1, kMidnight + kHour, kMidnight + 4 * kHour)).ok());
  // Outside: before and after.
  ASSERT_TRUE(report.Add(Session("s3", "carol", 8, kMidnight - 3 * kHour, kMidnight)).ok());
  ASSERT_TRUE(report.Add(Session("s4", "carol", 8, kMidnight + kDay, kMidnight + kDay + 1)).ok());
  const std::vector<UsageRow> rows = report.Rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].key, "vision");  // most first
  EXPECT_DOUBLE_EQ(rows[0].ipu_seconds, 4 * 3600.0);
  EXPECT_EQ(rows[0].sessions, 1);
  EXPECT_EQ(rows[1].key, "speech");
  EXPECT_DOUBLE_EQ(rows[1].ipu_seconds, 3 * 3600.0);
  EXPECT_DOUBLE_EQ(report.Total().ipu_seconds, 7 * 3600.0);
  EXPECT_EQ(report.Total().sessions, 2);
}

TEST(UsageReportTest, AClosedRecordCountsAtItsOwnRate) {
  UsageReport report(UsageGroupBy::kUser, kMidnight, kMidnight + kHour, kMidnight + kHour);
  UsageRecord r = Session("s1", "alice", 4, kMidnight - kHour, kMidnight + kHour);
  r.ipu_seconds = 100;  // whatever the ledger says, half of it is in the window
  ASSERT_TRUE(report.Add(r).ok());
  EXPECT_DOUBLE_EQ(report.Total().ipu_seconds, 50);
}

TEST(UsageReportTest, AnOpenRecordCountsUpToNow) {
  const int64_t now = kMidnight + 2 * kHour;
  UsageReport report(UsageGroupBy::kUser, kMidnight, kMidnight + kDay, now);
  ASSERT_TRUE(report.Add(Session("s1", "alice", 2, kMidnight + kHour, 0)).ok());
  EXPECT_DOUBLE_EQ(report.Total().ipu_seconds, 2 * 3600.0);
  const UsageRecord shown = AsOf(Session("s1", "alice", 2, kMidnight + kHour, 0), now);
  EXPECT_DOUBLE_EQ(shown.ipu_seconds, 2 * 3600.0);
  EXPECT_EQ(shown.end_unix_ms, 0);
  EXPECT_EQ(shown.state, "RUNNING");
}

TEST(UsageReportTest, AJobCountsOnceAndItsSessionsCarryItsIpuSeconds) {
  UsageReport report(UsageGroupBy::kUser, kMidnight, kMidnight + kDay, kMidnight + kDay);
  UsageRecord run = Session("s1", "alice", 2, kMidnight + kHour, kMidnight + 2 * kHour);
  run.job = "7";
  ASSERT_TRUE(report.Add(run).ok());
  ASSERT_TRUE(report.Add(Job("7", kMidnight + kHour, kMidnight + 2 * kHour)).ok());
  const UsageRow total = report.Total();
  EXPECT_DOUBLE_EQ(total.ipu_seconds, 2 * 3600.0);  // not 4 h: the job record adds none
  EXPECT_DOUBLE_EQ(total.job_ipu_seconds, 2 * 3600.0);
  EXPECT_EQ(total.jobs, 1);
  EXPECT_EQ(total.sessions, 0);  // the job's session is not an interactive one
}

TEST(UsageReportTest, ByDaySplitsAtUtcMidnightAndAddsUpToTheTotal) {
  UsageReport report(UsageGroupBy::kDay, kMidnight - kDay, kMidnight + kDay, kMidnight + kDay);
  // 1 IPU from 22:00 the day before to 02:00: 2 h on each day.
  ASSERT_TRUE(
      report.Add(Session("s1", "alice", 1, kMidnight - 2 * kHour, kMidnight + 2 * kHour)).ok());
  ASSERT_TRUE(report.Add(Job("9", kMidnight + 5 * kHour, kMidnight + 6 * kHour)).ok());
  const std::vector<UsageRow> rows = report.Rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].key, "2026-11-25");
  EXPECT_DOUBLE_EQ(rows[0].ipu_seconds, 2 * 3600.0);
  EXPECT_EQ(rows[0].sessions, 1);  // counted on the day it started
  EXPECT_EQ(rows[1].key, "2026-11-26");
  EXPECT_DOUBLE_EQ(rows[1].ipu_seconds, 2 * 3600.0);
  EXPECT_EQ(rows[1].sessions, 0);
  EXPECT_EQ(rows[1].jobs, 1);
  EXPECT_DOUBLE_EQ(report.Total().ipu_seconds, 4 * 3600.0);
  EXPECT_EQ(report.Total().sessions, 1);
}

TEST(UsageReportTest, TooManyRowsIsResourceExhausted) {
  UsageReport report(UsageGroupBy::kUser, 0, kMidnight, kMidnight);
  absl::Status status;
  for (int i = 0; i <= kMaxUsageGroups && status.ok(); ++i) {
    status = report.Add(Session("s", absl::StrCat("u", i), 1, kMidnight - kHour, kMidnight));
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(status.message()), HasSubstr("narrow the window"));
  EXPECT_EQ(report.Rows().size(), static_cast<size_t>(kMaxUsageGroups));
}

TEST(UsageReportTest, GroupsAndStatesParseOrSayWhatIsAccepted) {
  EXPECT_EQ(*ParseUsageGroupBy("Account"), UsageGroupBy::kAccount);
  EXPECT_EQ(*ParseUsageGroupBy("day"), UsageGroupBy::kDay);
  const absl::Status bad = ParseUsageGroupBy("team").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("user, account, qos or day"));
  EXPECT_EQ(*NormalizeState("server_restart"), "SERVER_RESTART");
  EXPECT_EQ(*NormalizeState("completed"), "COMPLETED");
  const absl::Status state = NormalizeState("DONE").status();
  EXPECT_EQ(state.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(state.message()), HasSubstr("RUNNING, RELEASED"));
  EXPECT_EQ(UtcDay(kMidnight), "2026-11-26");
}

}  // namespace
}  // namespace ipupod::accounting
