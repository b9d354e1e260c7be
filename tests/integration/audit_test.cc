// End to end: the audit log through the ipupod CLI against a real ipupodd
// (POD4, open mode, a config file). An admin injects faults, resets,
// repairs, force-removes a partition under a session, cancels another
// user's batch job and detaches another user's session; bob is refused a
// fault and a cancel; SIGHUP reloads a good and a bad config. `ipupod
// audit` then shows every one of them, with who, what, target and result,
// in order, as a table and as JSON; --since, --action and --user filter;
// bob is refused the log (exit 4); and the records survive kill -9 and a
// clean restart, which the log brackets with server.stop and server.start.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/tensor/tensor_files.h"
#include "tests/integration/harness.h"
#include "tests/support/models.h"
#include <signal.h>

namespace ipupod::testing {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr const char* kConfig = R"({"pod": "POD4"})";

// What one record says, for comparing sequences of records.
struct Seen {
  std::string user;
  std::string action;
  std::string target;
  std::string code;
  bool operator==(const Seen&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Seen& s) {
  return os << s.user << " " << s.action << " " << s.target << " " << s.code;
}

class AuditTest : public ::testing::Test {
 protected:
  CliResult Cli(const std::string& user, std::vector<std::string> args) {
    return RunCli(server_.address(), user, args);
  }
  CliResult Json(const std::string& user, std::vector<std::string> args) {
    args.insert(args.begin(), "--json");
    return Cli(user, args);
  }
  // The admin's view of the log (--json), every record of the last day.
  nlohmann::json Records(std::vector<std::string> filters = {}) {
    std::vector<std::string> args = {"audit", "--limit", "1000"};
    args.insert(args.end(), filters.begin(), filters.end());
    if (std::find(filters.begin(), filters.end(), "--since") == filters.end()) {
      args.insert(args.end(), {"--since", "-1d"});
    }
    CliResult r = Json("admin", args);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    const nlohmann::json doc = r.json();
    return doc.is_object() ? doc["records"] : nlohmann::json::array();
  }
  static std::vector<Seen> Summary(const nlohmann::json& records) {
    std::vector<Seen> out;
    for (const auto& r : records) {
      out.push_back({r["user"].get<std::string>(), r["action"].get<std::string>(),
                     r["target"].get<std::string>(), r["code"].get<std::string>()});
    }
    return out;
  }
  // Holds IPUs in the background; returns the process and its session id.
  Process Hold(const std::string& user, std::vector<std::string> args, std::string* session) {
    args.insert(args.begin(), {"--json", "attach"});
    Process p = StartCli(server_.address(), user, args);
    std::optional<nlohmann::json> granted = p.ReadStdoutJson(seconds(15));
    EXPECT_TRUE(granted) << p.stderr_text();
    if (granted) *session = (*granted)["session"].get<std::string>();
    return p;
  }
  std::string SubmitJob(const std::string& user) {
    const std::string dir = files_.path();
    EXPECT_TRUE(
        tensor::WriteFileAtomically(
            dir + "/m.onnx", test_support::RegressorModel(2, {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}))
            .ok());
    EXPECT_TRUE(
        tensor::WriteTensorFile(
            dir + "/d.npz", {{"x", *tensor::Tensor::FromValues<float>({2, 3}, {1, 2, 3, 4, 5, 6})},
                             {"t", *tensor::Tensor::FromValues<float>({2, 2}, {1, 2, 3, 4})}})
            .ok());
    EXPECT_EQ(Cli(user, {"compile", dir + "/m.onnx", "-o", dir + "/m.ipx"}).exit_code, 0);
    CliResult c = Json(user, {"submit", dir + "/m.ipx", "--inputs", dir + "/d.npz"});
    EXPECT_EQ(c.exit_code, 0) << c.out << c.err;
    const nlohmann::json doc = c.json();
    return doc.is_object() ? doc["jobs"][0]["id"].get<std::string>() : "";
  }
  void Reload(const std::string& config, size_t reloads) {
    std::ofstream(server_.config_path(), std::ios::trunc) << config;
    server_.Kill(SIGHUP);
    ASSERT_TRUE(Eventually(
        [&] {
          return Records({"--action", "config.reload"}).size() == reloads;
        },
        seconds(10)));
  }
  // The whole scenario: every audited action once, in this order.
  void Act();
  // What the scenario must leave, and the checks of the log it left.
  std::vector<Seen> Expected() const;
  void ExpectTheScenariosRecords(const nlohmann::json& records);
  void ExpectTheTable();
  void ExpectTheFilters(const nlohmann::json& records);

  ServerUnderTest server_{{}, kConfig};
  TempDir files_;
  std::string in_partition_;  // the session the forced removal detached
  std::string job_;           // alice's job, cancelled by the admin
  std::string whole_pod_;     // alice's session, detached by the admin
};

void AuditTest::Act() {
  EXPECT_EQ(Cli("bob", {"fault", "inject", "--ipu", "0", "--kind", "ipu-reset"}).exit_code, 4);
  ASSERT_EQ(Cli("admin", {"fault", "inject", "--ipu", "0", "--kind", "unrecoverable"}).exit_code,
            0);
  ASSERT_EQ(Cli("admin", {"ipu", "repair", "0"}).exit_code, 0);
  ASSERT_EQ(Cli("admin", {"fault", "inject", "--ipu", "1", "--kind", "ipu-reset"}).exit_code, 0);
  ASSERT_EQ(Cli("admin", {"ipu", "reset", "1"}).exit_code, 0);
  ASSERT_EQ(Cli("admin", {"pod", "reset"}).exit_code, 0);
  // A forced removal under alice's session detaches it.
  ASSERT_EQ(Cli("alice", {"partition", "create", "p", "--size", "2"}).exit_code, 0);
  std::string in_partition;
  Process held = Hold("alice", {"--ipus", "1", "--partition", "p"}, &in_partition);
  CliResult removed = Json("admin", {"partition", "remove", "p", "--force"});
  ASSERT_EQ(removed.exit_code, 0) << removed.out << removed.err;
  EXPECT_TRUE(held.Wait(seconds(10)).has_value());
  // alice holds the whole pod, so her job stays PENDING until it is cancelled.
  std::string whole_pod;
  Process holder = Hold("alice", {"--ipus", "4"}, &whole_pod);
  const std::string job = SubmitJob("alice");
  ASSERT_FALSE(job.empty());
  EXPECT_EQ(Cli("bob", {"job", "cancel", job}).exit_code, 4);
  ASSERT_EQ(Cli("admin", {"job", "cancel", job}).exit_code, 0);
  ASSERT_EQ(Cli("admin", {"detach", whole_pod}).exit_code, 0);
  EXPECT_TRUE(holder.Wait(seconds(10)).has_value());
  // alice's own detach ends her session: not audited.
  std::string own;
  Process mine = Hold("alice", {"--ipus", "1"}, &own);
  ASSERT_EQ(Cli("alice", {"detach", own}).exit_code, 0);
  EXPECT_TRUE(mine.Wait(seconds(10)).has_value());
  Reload(R"({"pod": "POD4", "sharing": {"order": "fifo"}})", 1);
  Reload(R"({"pod": "POD4", "sharing": {"order": "random"}})", 2);
  std::ofstream(server_.config_path(), std::ios::trunc) << kConfig;  // for the restarts
  in_partition_ = in_partition;
  job_ = job;
  whole_pod_ = whole_pod;
}

std::vector<Seen> AuditTest::Expected() const {
  return {
      {"ipupodd", "server.start", "server", "OK"},
      {"bob", "fault.inject", "ipu 0", "PERMISSION_DENIED"},
      {"admin", "fault.inject", "ipu 0", "OK"},
      {"admin", "ipu.repair", "ipu 0", "OK"},
      {"admin", "fault.inject", "ipu 1", "OK"},
      {"admin", "ipu.reset", "ipu 1", "OK"},
      {"admin", "pod.reset", "pod", "OK"},
      {"admin", "partition.remove.force", "partition p", "OK"},
      {"bob", "job.cancel.other", "job " + job_, "PERMISSION_DENIED"},
      {"admin", "job.cancel.other", "job " + job_, "OK"},
      {"admin", "session.detach.other", "session " + whole_pod_, "OK"},
      {"SIGHUP", "config.reload", server_.config_path(), "OK"},
      {"SIGHUP", "config.reload", server_.config_path(), "INVALID_ARGUMENT"},
  };
}

void AuditTest::ExpectTheScenariosRecords(const nlohmann::json& records) {
  ASSERT_EQ(Summary(records), Expected());
  for (size_t i = 1; i < records.size(); ++i) {
    EXPECT_GT(records[i]["seq"], records[i - 1]["seq"]);
    EXPECT_GE(records[i]["time_unix_ms"], records[i - 1]["time_unix_ms"]);
  }
  // Who: an admin's rights and the peer; the server's own records have none.
  EXPECT_FALSE(records[1]["admin"].get<bool>());
  EXPECT_TRUE(records[2]["admin"].get<bool>());
  EXPECT_THAT(records[1]["peer"].get<std::string>(), HasSubstr("127.0.0.1:"));
  EXPECT_EQ(records[0]["peer"], "");
  // Details and results.
  EXPECT_THAT(records[1]["message"].get<std::string>(), HasSubstr("only an admin"));
  EXPECT_EQ(records[2]["message"], "");
  EXPECT_THAT(records[2]["details"].get<std::string>(), HasSubstr("kind=unrecoverable"));
  EXPECT_THAT(records[5]["details"].get<std::string>(), HasSubstr("ipus=1"));
  EXPECT_THAT(records[6]["details"].get<std::string>(), HasSubstr("ipus=0-3"));
  EXPECT_THAT(records[7]["details"].get<std::string>(), HasSubstr("detached=" + in_partition_));
  EXPECT_THAT(records[8]["details"].get<std::string>(), HasSubstr("owner=alice"));
  EXPECT_THAT(records[10]["details"].get<std::string>(), HasSubstr("owner=alice"));
  EXPECT_THAT(records[11]["details"].get<std::string>(), HasSubstr("order=fifo"));
  EXPECT_THAT(records[12]["message"].get<std::string>(), HasSubstr("random"));
  EXPECT_EQ(records[12]["time"].get<std::string>().back(), 'Z');
}

// The table: one line per record with who, what, target and result, in order.
void AuditTest::ExpectTheTable() {
  CliResult table = Cli("admin", {"audit", "--since", "-1d"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  size_t at = 0;
  for (const Seen& s : Expected()) {
    const size_t line = table.out.find(s.action, at);
    ASSERT_NE(line, std::string::npos) << s << " after byte " << at << " in\n" << table.out;
    const std::string text = table.out.substr(line, table.out.find('\n', line) - line);
    EXPECT_THAT(text, HasSubstr(s.target)) << text;
    EXPECT_THAT(text, HasSubstr(s.code)) << text;
    const size_t start = table.out.rfind('\n', line) + 1;
    EXPECT_THAT(table.out.substr(start, line - start), HasSubstr(s.user));
    at = line + 1;
  }
  EXPECT_THAT(table.out, HasSubstr("admin (admin)"));
}

// --since the fifth record's time, --action, --user, --limit with its token.
void AuditTest::ExpectTheFilters(const nlohmann::json& records) {
  const int64_t fifth = records[4]["time_unix_ms"].get<int64_t>();
  const std::string since =
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(fifth), absl::UTCTimeZone());
  const nlohmann::json later = Records({"--since", since});
  ASSERT_FALSE(later.empty());
  EXPECT_LE(later[0]["seq"], records[4]["seq"]);
  EXPECT_GT(later[0]["seq"], records[0]["seq"]) << "the start was before";
  EXPECT_EQ(later.back()["seq"], records.back()["seq"]);
  for (const auto& r : later) EXPECT_GE(r["time_unix_ms"].get<int64_t>(), fifth);
  EXPECT_EQ(Records({"--action", "fault.inject"}).size(), 3u);
  EXPECT_EQ(Records({"--user", "bob"}).size(), 2u);
  const nlohmann::json page = Json("admin", {"audit", "--since", "-1d", "--limit", "3"}).json();
  EXPECT_EQ(page["records"].size(), 3u);
  EXPECT_EQ(page["next_page_token"], absl::StrCat(records[2]["seq"].get<int64_t>()));
  const nlohmann::json rest = Json("admin", {"audit", "--since", "-1d", "--page-token",
                                             page["next_page_token"].get<std::string>()})
                                  .json();
  EXPECT_EQ(rest["records"].size(), records.size() - 3);
}

TEST_F(AuditTest, EveryPrivilegedActionIsRecordedInOrderAndSurvivesRestarts) {
  Act();
  if (HasFatalFailure()) return;
  const nlohmann::json records = Records();
  ExpectTheScenariosRecords(records);
  if (HasFatalFailure()) return;
  ExpectTheTable();
  ExpectTheFilters(records);
  // Not an admin: refused, exit 4, saying why.
  CliResult denied = Cli("bob", {"audit"});
  EXPECT_EQ(denied.exit_code, 4);
  EXPECT_THAT(denied.err, HasSubstr("admins only"));
  EXPECT_EQ(Json("bob", {"audit"}).json()["error"]["code"], "PERMISSION_DENIED");
  // kill -9: nothing lost, no stop recorded; a clean restart records both.
  server_.KillAndRestart();
  nlohmann::json after = Records();
  ASSERT_EQ(after.size(), records.size() + 1) << after.dump();
  for (size_t i = 0; i < records.size(); ++i) EXPECT_EQ(after[i], records[i]) << i;
  EXPECT_EQ(after.back()["action"], "server.start");
  server_.Kill(SIGTERM);
  ASSERT_TRUE(server_.Restart()) << server_.process().stderr_text();
  after = Records();
  ASSERT_EQ(after.size(), records.size() + 3);
  EXPECT_EQ(after[after.size() - 2]["action"], "server.stop");
  EXPECT_THAT(after[after.size() - 2]["details"].get<std::string>(), HasSubstr("SIGTERM"));
  EXPECT_EQ(after.back()["action"], "server.start");
}

TEST_F(AuditTest, BadArgumentsAreUsageErrorsAndHelpTeaches) {
  CliResult r = Cli("admin", {"audit", "--action", "pod.rest"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("did you mean 'pod.reset'"));
  EXPECT_EQ(Cli("admin", {"audit", "--since", "yesterday"}).exit_code, 2);
  EXPECT_EQ(Cli("admin", {"audit", "--since", "-1h", "--until", "-2h"}).exit_code, 2);
  EXPECT_EQ(Cli("admin", {"audit", "--limit", "0"}).exit_code, 2);
  CliResult token = Cli("admin", {"audit", "--page-token", "x"});
  EXPECT_EQ(token.exit_code, 9);
  EXPECT_THAT(token.err, HasSubstr("page token"));
  CliResult help = Cli("admin", {"audit", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("Examples:"));
  EXPECT_THAT(help.out, HasSubstr("session.detach.other"));
}

}  // namespace
}  // namespace ipupod::testing
