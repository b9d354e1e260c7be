// `ipupod audit` output: the table (oldest first, who with "(admin)", "-"
// for what is empty, the error's message beside its code, the note saying
// how to go on) and the JSON document under the proto's names.
#include "client/cli/audit_output.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_split.h"

namespace ipupod::cli {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMidnightMs = 1'795'651'200'000;  // 2026-11-26 00:00:00 UTC

AuditRecords Records() {
  AuditRecords records;
  v1::AuditRecord* r = records.Add();
  r->set_seq(1);
  r->set_time_unix_ms(kMidnightMs);
  r->set_user("ipupodd");
  r->set_action("server.start");
  r->set_target("server");
  r->set_code("OK");
  r = records.Add();
  r->set_seq(2);
  r->set_time_unix_ms(kMidnightMs + 1234);
  r->set_user("bob");
  r->set_peer("ipv4:127.0.0.1:5000");
  r->set_action("fault.inject");
  r->set_target("ipu 3");
  r->set_details("kind=ipu-reset");
  r->set_code("PERMISSION_DENIED");
  r->set_message("only an admin may inject faults");
  r = records.Add();
  r->set_seq(3);
  r->set_time_unix_ms(kMidnightMs + 2000);
  r->set_user("ops");
  r->set_admin(true);
  r->set_peer("ipv4:10.0.0.7:5001");
  r->set_action("pod.reset");
  r->set_target("pod");
  r->set_details("ipus=0-15");
  r->set_code("OK");
  return records;
}

TEST(AuditOutputTest, TheTableShowsWhoWhatTargetAndResultInOrder) {
  const std::string text = AuditText(Records(), "", absl::UTCTimeZone());
  EXPECT_THAT(text, HasSubstr("SEQ  TIME"));
  EXPECT_THAT(text, HasSubstr("2026-11-26 00:00:01.234"));
  EXPECT_THAT(text, HasSubstr("PERMISSION_DENIED: only an admin may inject faults"));
  EXPECT_THAT(text, HasSubstr("ops (admin)"));
  const size_t start = text.find("server.start");
  const size_t fault = text.find("fault.inject");
  const size_t reset = text.find("pod.reset");
  EXPECT_LT(start, fault);
  EXPECT_LT(fault, reset);
  EXPECT_EQ(text.find("more records"), std::string::npos);
  const std::string first = text.substr(text.find('\n') + 1);
  const std::vector<std::string> cells =
      absl::StrSplit(first.substr(0, first.find('\n')), ' ', absl::SkipEmpty());
  ASSERT_GE(cells.size(), 8u);
  EXPECT_EQ(cells[3], "ipupodd");
  EXPECT_EQ(cells[4], "-") << "no peer";
  EXPECT_EQ(cells[7], "-") << "no details";
}

TEST(AuditOutputTest, AFullPageSaysHowToGoOn) {
  EXPECT_THAT(AuditText(Records(), "3", absl::UTCTimeZone()), HasSubstr("--page-token 3"));
  EXPECT_EQ(AuditText(AuditRecords(), "", absl::UTCTimeZone()), "no audit records match\n");
}

TEST(AuditOutputTest, JsonUsesTheProtosNamesAndAnRfc3339Time) {
  const Json doc = AuditJson(Records(), "3");
  ASSERT_EQ(doc["records"].size(), 3u);
  const Json& r = doc["records"][1];
  EXPECT_EQ(r["seq"], 2);
  EXPECT_EQ(r["time_unix_ms"], kMidnightMs + 1234);
  EXPECT_EQ(r["time"], "2026-11-26T00:00:01.234Z");
  EXPECT_EQ(r["user"], "bob");
  EXPECT_EQ(r["admin"], false);
  EXPECT_EQ(r["peer"], "ipv4:127.0.0.1:5000");
  EXPECT_EQ(r["action"], "fault.inject");
  EXPECT_EQ(r["target"], "ipu 3");
  EXPECT_EQ(r["details"], "kind=ipu-reset");
  EXPECT_EQ(r["code"], "PERMISSION_DENIED");
  EXPECT_EQ(r["message"], "only an admin may inject faults");
  EXPECT_EQ(doc["next_page_token"], "3");
}

}  // namespace
}  // namespace ipupod::cli
