// `ipupod usage` and `ipupod history` output: the table, JSON under the
// proto's names, and CSV that a CSV reader reads back.
#include "client/cli/accounting_output.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ipupod::cli {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMidnightMs = 1'795'651'200'000;  // 2026-11-26 00:00:00 UTC

v1::GetUsageResponse Usage() {
  v1::GetUsageResponse u;
  u.set_group_by("account");
  u.set_since_unix_ms(kMidnightMs - 7 * 24 * 3600 * 1000);
  u.set_until_unix_ms(kMidnightMs);
  v1::UsageGroup* g = u.add_groups();
  g->set_key("vision");
  g->set_ipu_seconds(7200);
  g->set_job_ipu_seconds(3600);
  g->set_sessions(3);
  g->set_jobs(1);
  g = u.add_groups();
  g->set_key("speech, east");
  g->set_ipu_seconds(900);
  g->set_sessions(1);
  v1::UsageGroup* total = u.mutable_total();
  total->set_key("TOTAL");
  total->set_ipu_seconds(8100);
  total->set_job_ipu_seconds(3600);
  total->set_sessions(4);
  total->set_jobs(1);
  return u;
}

v1::ListHistoryResponse History() {
  v1::ListHistoryResponse h;
  v1::UsageRecord* r = h.add_records();
  r->set_id("s2-3");
  r->set_kind("session");
  r->set_user("alice");
  r->set_account("vision");
  r->set_qos("normal");
  r->set_ipus(4);
  r->set_submit_unix_ms(kMidnightMs);
  r->set_start_unix_ms(kMidnightMs + 1000);
  r->set_ipu_seconds(40);
  r->set_state("RUNNING");
  r = h.add_records();
  r->set_id("17");
  r->set_kind("job");
  r->set_user("bob");
  r->set_account("speech");
  r->set_qos("scavenger");
  r->set_ipus(2);
  r->set_submit_unix_ms(kMidnightMs - 60000);
  r->set_start_unix_ms(kMidnightMs - 30000);
  r->set_end_unix_ms(kMidnightMs);
  r->set_ipu_seconds(60);
  r->set_state("COMPLETED");
  h.set_truncated(true);
  return h;
}

TEST(UsageOutputTest, TheTableLooksLikeSreport) {
  EXPECT_EQ(UsageText(Usage(), absl::UTCTimeZone()),
            "usage from 2026-11-19 00:00:00 to 2026-11-26 00:00:00 by account\n"
            "ACCOUNT       IPU-HOURS  JOB IPU-HOURS  SESSIONS  JOBS\n"
            "vision            2.000          1.000         3     1\n"
            "speech, east      0.250          0.000         1     0\n"
            "TOTAL             2.250          1.000         4     1\n");
  v1::GetUsageResponse empty = Usage();
  empty.clear_groups();
  empty.set_user("alice");
  EXPECT_THAT(UsageText(empty, absl::UTCTimeZone()),
              HasSubstr("by account, of alice only\nnothing was used in that window\n"));
}

TEST(UsageOutputTest, JsonAndCsv) {
  const Json doc = UsageJson(Usage());
  EXPECT_EQ(doc["group_by"], "account");
  ASSERT_EQ(doc["groups"].size(), 2u);
  EXPECT_EQ(doc["groups"][0]["key"], "vision");
  EXPECT_DOUBLE_EQ(doc["groups"][0]["ipu_hours"].get<double>(), 2.0);
  EXPECT_EQ(doc["total"]["sessions"], 4);
  EXPECT_EQ(UsageCsv(Usage()),
            "account,ipu_hours,ipu_seconds,job_ipu_seconds,sessions,jobs\n"
            "vision,2.000000,7200.000,3600.000,3,1\n"
            "\"speech, east\",0.250000,900.000,0.000,1,0\n");
}

TEST(HistoryOutputTest, TheTableLooksLikeSacct) {
  EXPECT_EQ(HistoryText(History(), absl::UTCTimeZone()),
            "ID    KIND     USER   ACCOUNT  QOS        JOB  IPUS  SUBMIT               START    "
            "            END                  IPU-SECONDS  STATE\n"
            "s2-3  session  alice  vision   normal     -       4  2026-11-26 00:00:00  2026-11-2"
            "6 00:00:01  -                           40.0  RUNNING\n"
            "17    job      bob    speech   scavenger  -       2  2026-11-25 23:59:00  2026-11-2"
            "5 23:59:30  2026-11-26 00:00:00         60.0  COMPLETED\n"
            "(older records not shown: raise --limit or narrow --since)\n");
  EXPECT_EQ(HistoryText(v1::ListHistoryResponse(), absl::UTCTimeZone()),
            "no usage records match\n");
}

TEST(HistoryOutputTest, JsonAndCsv) {
  const Json doc = HistoryJson(History());
  ASSERT_EQ(doc["records"].size(), 2u);
  EXPECT_EQ(doc["records"][0]["end_unix_ms"], 0);
  EXPECT_EQ(doc["records"][1]["state"], "COMPLETED");
  EXPECT_EQ(doc["truncated"], true);
  EXPECT_EQ(HistoryCsv(History()),
            "id,kind,user,account,qos,job,partition,ipus,submit,start,end,ipu_seconds,state\n"
            "s2-3,session,alice,vision,normal,,,4,2026-11-26T00:00:00.000Z,"
            "2026-11-26T00:00:01.000Z,,40.000,RUNNING\n"
            "17,job,bob,speech,scavenger,,,2,2026-11-25T23:59:00.000Z,2026-11-25T23:59:30.000Z,"
            "2026-11-26T00:00:00.000Z,60.000,COMPLETED\n");
}

TEST(CsvFieldTest, QuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(CsvField("plain"), "plain");
  EXPECT_EQ(CsvField("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvField("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(CsvField("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(CsvField(""), "");
  EXPECT_EQ(CsvField("job\x1b[2J"), "job\\x1b[2J");  // escaped, as in every text output
}

}  // namespace
}  // namespace ipupod::cli
