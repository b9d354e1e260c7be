// End to end: usage accounting through the ipupod CLI against a real ipupodd
// (POD4, open mode, two accounts, a heartbeat every second): sessions and a
// batch job leave records with the right fields; `usage --by account` sums
// what the records' own start and end say; --json and --csv parse; a clean
// restart keeps every record and ends open sessions SHUTDOWN; a kill -9 ends
// them SERVER_RESTART at the last heartbeat, still counted by `usage` and by
// the fair-share usage of `ipupod shares`; max_jobs_pending through
// `ipupod submit`; and bad input, refused and changing nothing.
#include <chrono>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_split.h"
#include "common/tensor/tensor_files.h"
#include "tests/integration/harness.h"
#include "tests/support/models.h"
#include <signal.h>

namespace ipupod::testing {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr const char* kConfig = R"({
  "pod": "POD4",
  "accounting_heartbeat_seconds": 1,
  "sharing": {
    "accounts": [{"name": "vision", "shares": 3, "users": ["alice", "carol"]},
                 {"name": "speech", "shares": 1, "users": ["bob", "alice"]}],
    "qos": [{"name": "normal", "priority": 100, "per_user": {"max_jobs_pending": 1}},
            {"name": "high", "priority": 1000, "admins_only": true},
            {"name": "scavenger", "preemptible": true}]
  }
})";

// IPUs x the record's own duration: what every ended session must have.
double Expected(const nlohmann::json& r) {
  return r["ipus"].get<double>() *
         static_cast<double>(r["end_unix_ms"].get<int64_t>() - r["start_unix_ms"].get<int64_t>()) /
         1000;
}

std::vector<std::vector<std::string>> ParseCsv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    rows.push_back(absl::StrSplit(line, ','));  // the test's fields hold no commas
  }
  return rows;
}

class AccountingTest : public ::testing::Test {
 protected:
  CliResult Cli(const std::string& user, std::vector<std::string> args) {
    args.insert(args.begin(), "--json");
    return RunCli(server_.address(), user, args);
  }
  // Every record, as an admin sees them.
  nlohmann::json History() {
    return Cli("admin", {"history", "--limit", "10000"}).json()["records"];
  }
  nlohmann::json Record(const std::string& id) {
    for (const auto& r : History()) {
      if (r["id"] == id) return r;
    }
    return nullptr;
  }
  Process Hold(const std::string& user, std::vector<std::string> args) {
    args.insert(args.begin(), {"--json", "attach"});
    Process p = StartCli(server_.address(), user, args);
    std::optional<nlohmann::json> granted = p.ReadStdoutJson(std::chrono::seconds(15));
    EXPECT_TRUE(granted) << p.stderr_text();
    if (granted) held_session_ = (*granted)["session"].get<std::string>();
    return p;
  }
  void CompileModel() {
    ASSERT_TRUE(tensor::WriteFileAtomically(
                    files_.path() + "/m.onnx",
                    test_support::RegressorModel(2, {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}))
                    .ok());
    ASSERT_TRUE(tensor::WriteTensorFile(
                    files_.path() + "/d.npz",
                    {{"x", *tensor::Tensor::FromValues<float>({2, 3}, {1, 2, 3, 4, 5, 6})},
                     {"t", *tensor::Tensor::FromValues<float>({2, 2}, {1, 2, 3, 4})}})
                    .ok());
    CliResult c =
        Cli("alice", {"compile", files_.path() + "/m.onnx", "-o", files_.path() + "/m.ipx"});
    ASSERT_EQ(c.exit_code, 0) << c.err;
  }
  CliResult Submit(const std::string& user, std::vector<std::string> extra) {
    std::vector<std::string> args = {"submit", files_.path() + "/m.ipx", "--inputs",
                                     files_.path() + "/d.npz"};
    args.insert(args.end(), extra.begin(), extra.end());
    return Cli(user, args);
  }
  // A session's record once it is closed (the server writes it when the
  // stream ends, a moment after the CLI exits).
  nlohmann::json Closed(const std::string& id) {
    nlohmann::json r;
    EXPECT_TRUE(Eventually(
        [&] {
          r = Record(id);
          return r.is_object() && r["state"] != "RUNNING";
        },
        seconds(10)))
        << "record " << id << " was not closed: " << r;
    return r;
  }

  // The records checked field by field; each account's IPU-seconds and
  // interactive sessions computed from them.
  struct Sums {
    std::map<std::string, double> by_account;
    std::map<std::string, int> interactive;
  };
  Sums CheckRecords(const nlohmann::json& records, const std::string& job) {
    Sums sums;
    for (const auto& r : records) {
      SCOPED_TRACE(r.dump());
      EXPECT_LE(r["submit_unix_ms"].get<int64_t>(), r["start_unix_ms"].get<int64_t>());
      EXPECT_LE(r["start_unix_ms"].get<int64_t>(), r["end_unix_ms"].get<int64_t>());
      if (r["kind"] == "job") {
        EXPECT_EQ(r["id"], job);
        EXPECT_EQ(r["user"], "carol");
        EXPECT_EQ(r["account"], "vision");
        EXPECT_EQ(r["qos"], "scavenger");
        EXPECT_EQ(r["state"], "COMPLETED");
        continue;
      }
      EXPECT_EQ(r["state"], "RELEASED");
      EXPECT_NEAR(r["ipu_seconds"].get<double>(), Expected(r), 0.01);
      sums.by_account[r["account"].get<std::string>()] += Expected(r);
      if (r["job"] == "") sums.interactive[r["account"].get<std::string>()] += 1;
      if (r["job"] == job) {
        EXPECT_EQ(r["qos"], "scavenger");
      }
    }
    return sums;
  }

  ServerUnderTest server_{{}, kConfig};
  TempDir files_;
  std::string held_session_;
};

TEST_F(AccountingTest, SessionsAndAJobLeaveRecordsAndUsageSumsThem) {
  ASSERT_NO_FATAL_FAILURE(CompileModel());
  ASSERT_EQ(Cli("alice", {"attach", "--ipus", "2", "--", "sleep", "0.3"}).exit_code, 0);
  ASSERT_EQ(Cli("alice", {"attach", "--ipus", "1", "--account", "speech", "--", "true"}).exit_code,
            0);
  ASSERT_EQ(Cli("bob", {"attach", "--ipus", "4", "--qos", "scavenger", "--", "true"}).exit_code, 0);
  CliResult submitted = Submit("carol", {"--qos", "scavenger"});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string job = submitted.json()["jobs"][0]["id"].get<std::string>();
  EXPECT_EQ(submitted.json()["jobs"][0]["account"], "vision");
  EXPECT_EQ(submitted.json()["jobs"][0]["qos"], "scavenger");
  ASSERT_EQ(RunCli(server_.address(), "carol", {"job", "wait", job, "--timeout", "60s"}).exit_code,
            0);
  nlohmann::json records;
  ASSERT_TRUE(Eventually(
      [&] {
        records = History();
        int closed = 0;
        for (const auto& r : records) closed += r["state"] != "RUNNING";
        return records.size() == 5u && closed == 5;
      },
      seconds(10)))
      << records;

  const Sums sums = CheckRecords(records, job);
  EXPECT_EQ(sums.interactive.at("vision"), 1);
  EXPECT_EQ(sums.interactive.at("speech"), 2);  // alice's --account speech and bob's
  std::map<std::string, double> by_account = sums.by_account;
  std::map<std::string, int> interactive = sums.interactive;

  const std::string since = "-1h";
  nlohmann::json usage = Cli("admin", {"usage", "--by", "account", "--since", since}).json();
  ASSERT_EQ(usage["groups"].size(), 2u) << usage;
  for (const auto& g : usage["groups"]) {
    const std::string account = g["key"].get<std::string>();
    EXPECT_NEAR(g["ipu_seconds"].get<double>(), by_account[account], 0.05) << account;
    EXPECT_EQ(g["sessions"], interactive[account]) << account;
    EXPECT_EQ(g["jobs"], account == "vision" ? 1 : 0) << account;
  }
  // CSV says the same.
  CliResult csv =
      RunCli(server_.address(), "admin", {"usage", "--by", "account", "--since", since, "--csv"});
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  const auto rows = ParseCsv(csv.out);
  ASSERT_EQ(rows.size(), 3u) << csv.out;
  EXPECT_EQ(rows[0][0], "account");
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_NEAR(std::stod(rows[i][2]), by_account[rows[i][0]], 0.05) << csv.out;
  }
  CliResult history_csv = RunCli(server_.address(), "admin", {"history", "--csv"});
  ASSERT_EQ(history_csv.exit_code, 0) << history_csv.err;
  EXPECT_EQ(ParseCsv(history_csv.out).size(), 6u) << history_csv.out;
  // A user sees their own records only.
  nlohmann::json mine = Cli("bob", {"history"}).json()["records"];
  ASSERT_EQ(mine.size(), 1u) << mine;
  EXPECT_EQ(mine[0]["user"], "bob");
  EXPECT_EQ(Cli("bob", {"usage", "--by", "user", "--since", since}).json()["groups"].size(), 1u);
}

TEST_F(AccountingTest, ACleanRestartKeepsEveryRecordAndEndsOpenSessionsShutdown) {
  ASSERT_EQ(Cli("bob", {"attach", "--ipus", "1", "--", "true"}).exit_code, 0);
  Process held = Hold("alice", {"--ipus", "2"});
  const std::string open_id = held_session_;
  ASSERT_EQ(Record(open_id)["state"], "RUNNING");
  server_.Kill(SIGTERM);
  ASSERT_EQ(server_.process().Wait(seconds(20)), 0) << server_.process().stderr_text();
  ASSERT_TRUE(server_.Restart()) << server_.process().stderr_text();
  const nlohmann::json records = History();
  ASSERT_EQ(records.size(), 2u) << records;
  const nlohmann::json r = Record(open_id);
  EXPECT_EQ(r["state"], "SHUTDOWN");
  EXPECT_GT(r["end_unix_ms"].get<int64_t>(), r["start_unix_ms"].get<int64_t>());
  EXPECT_NEAR(r["ipu_seconds"].get<double>(), Expected(r), 0.01);
  EXPECT_THAT(server_.process().stderr_text(), ::testing::Not(HasSubstr("SERVER_RESTART")));
}

TEST_F(AccountingTest, AKill9EndsTheOpenSessionAtTheLastHeartbeatAndUsageSurvives) {
  Process held = Hold("alice", {"--ipus", "2", "--account", "speech"});
  const std::string id = held_session_;
  // Held long enough for a few heartbeats (one a second).
  ASSERT_TRUE(Eventually(
      [&] {
        const nlohmann::json r = Record(id);
        return r.is_object() && r["ipu_seconds"].get<double>() >= 2 * 3.5;
      },
      seconds(20)));
  const int64_t killed_ms = absl::ToUnixMillis(absl::Now());
  server_.KillAndRestart();
  const nlohmann::json r = Record(id);
  ASSERT_TRUE(r.is_object()) << History();
  EXPECT_EQ(r["state"], "SERVER_RESTART");
  const int64_t end = r["end_unix_ms"].get<int64_t>();
  EXPECT_LE(end, killed_ms) << "it ended at the restart, not at the last heartbeat";
  EXPECT_GE(end, killed_ms - 2500) << "the last heartbeat is at most a second old";
  EXPECT_GT(end, r["start_unix_ms"].get<int64_t>());
  EXPECT_NEAR(r["ipu_seconds"].get<double>(), Expected(r), 0.01);
  // Still counted: by `usage`, and by the fair-share usage the scheduler
  // rebuilt from the ledger.
  nlohmann::json usage = Cli("alice", {"usage", "--by", "account", "--since", "-1h"}).json();
  ASSERT_EQ(usage["groups"].size(), 1u) << usage;
  EXPECT_EQ(usage["groups"][0]["key"], "speech");
  EXPECT_NEAR(usage["groups"][0]["ipu_seconds"].get<double>(), Expected(r), 0.05);
  nlohmann::json shares = Cli("alice", {"shares"}).json()["accounts"];  // her accounts
  bool found = false;
  for (const auto& a : shares) {
    if (a["account"] != "speech") continue;
    found = true;
    EXPECT_NEAR(a["usage_ipu_seconds"].get<double>(), Expected(r), 0.05) << a;
  }
  EXPECT_TRUE(found) << shares;
  EXPECT_TRUE(server_.process().WaitForStderr("ended SERVER_RESTART", seconds(5)));
}

TEST_F(AccountingTest, MaxJobsPendingRefusesTheSubmitAndChangesNothing) {
  ASSERT_NO_FATAL_FAILURE(CompileModel());
  Process held = Hold("alice", {"--ipus", "4"});  // the jobs stay pending
  CliResult first = Submit("bob", {});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  CliResult second = Submit("bob", {});
  EXPECT_EQ(second.exit_code, 5) << second.out;
  EXPECT_THAT(second.json()["error"]["message"].get<std::string>(),
              HasSubstr("QosMaxJobsPendingPerUser: bob in QoS normal has 1 pending jobs, the "
                        "limit is 1, and this submit adds 1"));
  nlohmann::json jobs = Cli("bob", {"jobs", "--all"}).json()["jobs"];
  ASSERT_EQ(jobs.size(), 1u) << jobs;
  EXPECT_EQ(jobs[0]["account"], "speech");
  EXPECT_EQ(jobs[0]["qos"], "normal");
  // Another QoS is another count.
  EXPECT_EQ(Submit("bob", {"--qos", "scavenger"}).exit_code, 0);
  held.Signal(SIGINT);
  const nlohmann::json all = Cli("bob", {"jobs", "--all"}).json()["jobs"];
  for (const auto& j : all) {
    EXPECT_EQ(RunCli(server_.address(), "bob",
                     {"job", "wait", j["id"].get<std::string>(), "--timeout", "60s"})
                  .exit_code,
              0);
  }
}

TEST_F(AccountingTest, BadInputIsRefusedSayingWhatToDo) {
  const auto usage_error = [&](const std::string& user, std::vector<std::string> args,
                               const std::string& words) {
    CliResult r = Cli(user, args);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_EQ(r.json()["error"]["code"], "INVALID_ARGUMENT") << r.out;
    EXPECT_THAT(r.json()["error"]["message"].get<std::string>(), HasSubstr(words));
  };
  usage_error("alice", {"usage", "--by", "team"}, "use user, account, qos or day");
  usage_error("alice", {"usage", "--since", "last week"}, "RFC 3339");
  usage_error("alice", {"usage", "--since", "now", "--until", "-1d"}, "the window is empty");
  usage_error("alice", {"history", "--state", "done"}, "RUNNING, RELEASED");
  usage_error("alice", {"history", "--limit", "0"}, "--limit");
  usage_error("alice", {"history", "--csv"}, "choose one output format");
  CliResult other = Cli("alice", {"history", "--user", "bob"});
  EXPECT_EQ(other.exit_code, 4);
  EXPECT_THAT(other.json()["error"]["message"].get<std::string>(),
              HasSubstr("only your own usage records"));
  ASSERT_NO_FATAL_FAILURE(CompileModel());
  CliResult gold = Submit("alice", {"--qos", "gold"});
  EXPECT_EQ(gold.exit_code, 9) << gold.out;
  EXPECT_THAT(gold.json()["error"]["message"].get<std::string>(), HasSubstr("normal, high"));
  EXPECT_EQ(Submit("alice", {"--qos", "high"}).exit_code, 4);
  EXPECT_EQ(Submit("bob", {"--account", "vision"}).exit_code, 4);
  EXPECT_TRUE(Cli("alice", {"jobs", "--all"}).json()["jobs"].empty());
  EXPECT_TRUE(History().empty());
}

}  // namespace
}  // namespace ipupod::testing
