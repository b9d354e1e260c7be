// End to end: fair sharing through the ipupod CLI against a real ipupodd
// (POD4, open mode, a "sharing" config): accounts and QoS checked at attach,
// limits holding requests with their reason, the queue walked in priority
// order, `ipupod priority` and `ipupod shares`, and SIGHUP reloads (a bad
// config changes nothing).
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/integration/harness.h"
#include <signal.h>
#include <sys/stat.h>

namespace ipupod::testing {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr const char* kConfig = R"({
  "pod": "POD4",
  "sharing": {
    "accounts": [{"name": "vision", "shares": 3, "users": ["alice", "carol"]},
                 {"name": "speech", "shares": 1, "users": ["bob", "alice"]}],
    "qos": [{"name": "normal", "priority": 100},
            {"name": "high", "priority": 1000, "admins_only": true},
            {"name": "scavenger", "preemptible": true, "per_user": {"max_ipus": 2}}],
    "preempt_grace_seconds": 3
  }
})";

class SharingTest : public ::testing::Test {
 protected:
  explicit SharingTest(const char* config = kConfig) : server_({}, config) {}
  CliResult Cli(const std::string& user, std::vector<std::string> args) {
    args.insert(args.begin(), "--json");
    return RunCli(server_.address(), user, args);
  }
  Process Hold(const std::string& user, std::vector<std::string> args) {
    args.insert(args.begin(), {"--json", "attach"});
    Process p = StartCli(server_.address(), user, args);
    EXPECT_TRUE(p.ReadStdoutJson(seconds(15))) << p.stderr_text();
    return p;
  }
  Process Waiter(const std::string& user, std::vector<std::string> args) {
    args.insert(args.begin(), {"--json", "attach", "--wait"});
    return StartCli(server_.address(), user, args);
  }
  nlohmann::json Queue() { return Cli("alice", {"queue"}).json().at("entries"); }
  bool QueueLengthIs(size_t n) {
    return Eventually([&] { return Queue().size() == n; }, seconds(10));
  }
  void RewriteConfig(const std::string& json) {
    std::ofstream(server_.config_path(), std::ios::trunc) << json;
    server_.Kill(SIGHUP);
  }

  ServerUnderTest server_;
};

TEST_F(SharingTest, AccountsAndQosAreCheckedAtAttach) {
  CliResult r = Cli("bob", {"attach", "--ipus", "1", "--account", "vision"});
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_THAT(r.json()["error"]["message"].get<std::string>(),
              HasSubstr("bob is not a member of account vision; yours: speech"));
  r = Cli("dave", {"attach", "--ipus", "1"});
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_THAT(r.json()["error"]["message"].get<std::string>(), HasSubstr("belongs to no account"));
  r = Cli("bob", {"attach", "--ipus", "1", "--qos", "high"});
  EXPECT_EQ(r.exit_code, 4);
  r = Cli("bob", {"attach", "--ipus", "1", "--qos", "gold"});
  EXPECT_EQ(r.exit_code, 9);
  EXPECT_THAT(r.json()["error"]["message"].get<std::string>(),
              HasSubstr("normal, high, scavenger"));
  r = Cli("bob", {"attach", "--ipus", "1", "--time-limit", "ten"});
  EXPECT_EQ(r.exit_code, 2);
  // Nothing was granted or queued by any of them.
  EXPECT_EQ(Cli("alice", {"info"}).json()["pod"]["free_ipus"], 4);
}

TEST_F(SharingTest, AQosLimitHoldsWithItsReasonOrRefusesAtOnce) {
  Process held = Hold("alice", {"--ipus", "2", "--qos", "scavenger"});
  CliResult over = Cli("alice", {"attach", "--ipus", "4", "--wait", "--qos", "scavenger"});
  EXPECT_EQ(over.exit_code, 5);
  EXPECT_THAT(over.json()["error"]["message"].get<std::string>(),
              HasSubstr("QosMaxIpusPerUser: alice in QoS scavenger may hold at most 2 IPUs"));
  CliResult now = Cli("alice", {"attach", "--ipus", "1", "--qos", "scavenger"});
  EXPECT_EQ(now.exit_code, 5);
  EXPECT_THAT(now.json()["error"]["message"].get<std::string>(),
              HasSubstr("QosMaxIpusPerUser: alice in QoS scavenger holds 2 IPUs, the limit is 2"));
  EXPECT_EQ(Cli("alice", {"attach", "--ipus", "1", "--", "true"}).exit_code, 0);  // normal QoS
  Process waiting = Waiter("alice", {"--ipus", "1", "--qos", "scavenger", "--", "true"});
  ASSERT_TRUE(QueueLengthIs(1));
  EXPECT_EQ(Queue()[0]["reason"], "QosMaxIpusPerUser");
  EXPECT_EQ(Queue()[0]["account"], "vision");
  EXPECT_EQ(Queue()[0]["qos"], "scavenger");
  held.Signal(SIGINT);
  EXPECT_EQ(waiting.Wait(seconds(20)), 0) << waiting.stderr_text();
}

TEST_F(SharingTest, TheAccountThatUsedLessGoesFirstAndPrioritySaysWhy) {
  {
    // vision uses the pod for a while: its fair-share factor drops.
    Process a = Hold("alice", {"--ipus", "2"});
    Process b = Hold("alice", {"--ipus", "2", "--account", "speech"});
    std::this_thread::sleep_for(seconds(2));
  }
  Process holder = Hold("bob", {"--ipus", "2"});
  Process holder2 = Hold("carol", {"--ipus", "2"});
  Process first = Waiter("bob", {"--ipus", "4"});
  ASSERT_TRUE(QueueLengthIs(1));
  Process second = Waiter("alice", {"--ipus", "4", "--account", "vision"});
  ASSERT_TRUE(QueueLengthIs(2));
  nlohmann::json queue = Cli("alice", {"priority"}).json().at("entries");
  // speech (1 share) and vision (3 shares) used the same: speech used more
  // than its share, vision less, so alice's later vision request leads.
  EXPECT_EQ(queue[0]["user"], "alice");
  EXPECT_EQ(queue[0]["reason"], "Resources");
  EXPECT_GT(queue[0]["fair_share"].get<double>(), queue[1]["fair_share"].get<double>());
  EXPECT_GT(queue[0]["priority"].get<double>(), queue[1]["priority"].get<double>());
  // alice belongs to both accounts: she sees both (usage is private,
  // docs/accounting.md; dave, in neither, would see none).
  nlohmann::json shares = Cli("alice", {"shares"}).json();
  ASSERT_EQ(shares["accounts"].size(), 2u);
  EXPECT_EQ(shares["accounts"][0]["account"], "speech");
  EXPECT_DOUBLE_EQ(shares["accounts"][0]["shares_fraction"].get<double>(), 0.25);
  EXPECT_GT(shares["accounts"][0]["usage_ipu_seconds"].get<double>(), 3.0);
  EXPECT_EQ(shares["order"], "multifactor");
  first.Signal(SIGINT);
  second.Signal(SIGINT);
}

TEST_F(SharingTest, SighupReloadsTheSharingPolicyAndABadOneChangesNothing) {
  Process held = Hold("bob", {"--ipus", "2"});  // a session lives through reloads
  RewriteConfig(R"({"pod": "POD4", "sharing": {"accounts": [{"name": "x", "shares": 0}]}})");
  EXPECT_TRUE(server_.process().WaitForStderr("old one stays in force", seconds(10)));
  EXPECT_EQ(Cli("alice", {"shares"}).json()["accounts"].size(), 2u);  // the old policy
  RewriteConfig(R"({"pod": "POD4", "sharing": {"order": "fifo"}})");
  EXPECT_TRUE(
      Eventually([&] { return Cli("carol", {"shares"}).json()["order"] == "fifo"; }, seconds(10)));
  // No accounts now: dave is an account of his own and may attach.
  Process dave = Hold("dave", {"--ipus", "1"});
  nlohmann::json info = Cli("dave", {"info"}).json();
  EXPECT_EQ(info["pod"]["free_ipus"], 1);  // bob's session is still there
}

// Issue 29: a reload that met changed tokens said nothing of them. It says
// which keys it applied and which wait for a restart (the log and the audit
// record), and the new token is not in force until then.
TEST_F(SharingTest, SighupSaysWhichKeysItAppliedAndWhichWaitForARestart) {
  std::string config = kConfig;
  config.insert(config.find('{') + 1,
                R"("max_waiters": 77, "tokens": [{"token": "new-secret", "user": "carol"}],)");
  RewriteConfig(config);
  EXPECT_TRUE(server_.process().WaitForStderr(
      "SIGHUP: max_waiters,tokens changed in " + server_.config_path() +
          " since the start, but a reload applies only sharing: restart ipupodd to put them in "
          "force",
      seconds(10)))
      << server_.process().stderr_text();
  // Still open mode: the token is not in force, callers still name themselves.
  EXPECT_EQ(Cli("dave", {"info"}).exit_code, 0);
}

// Issue 29: a FIFO in the config's place blocked the SIGHUP loop in open(),
// so SIGTERM went unheard; /dev/zero was read until memory ran out. Both are
// refused at once, and SIGTERM still stops the server.
TEST_F(SharingTest, AConfigThatIsAFifoOrADeviceIsRefusedAndSigtermStillStops) {
  const std::string path = server_.config_path();
  std::filesystem::remove(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  server_.Kill(SIGHUP);
  EXPECT_TRUE(server_.process().WaitForStderr(
      "config file '" + path + "' is not a regular file but a FIFO", seconds(10)));
  std::filesystem::remove(path);
  std::filesystem::create_symlink("/dev/zero", path);
  server_.Kill(SIGHUP);
  EXPECT_TRUE(server_.process().WaitForStderr(
      "config file '" + path + "' is not a regular file but a device", seconds(10)));
  server_.Kill(SIGTERM);
  EXPECT_EQ(server_.process().Wait(seconds(10)), 0) << server_.process().stderr_text();
}

TEST_F(SharingTest, ScavengerSessionsArePreemptedWithANoticeAndAGrace) {
  // A command that saves its work on SIGTERM and exits; a hold without one.
  Process command = Hold("alice", {"--ipus", "2", "--qos", "scavenger", "--", "sh", "-c",
                                   "trap 'echo saved; exit 0' TERM; while :; do sleep 0.1; done"});
  Process hold = Hold("carol", {"--ipus", "2", "--qos", "scavenger"});
  Process waiter = Waiter("bob", {"--ipus", "4", "--", "true"});
  // bob's request (QoS normal) needs both blocks: both sessions are told, the
  // command gets SIGTERM and exits, the hold lets go at once.
  EXPECT_EQ(command.Wait(seconds(20)), 0) << command.stderr_text();
  EXPECT_THAT(command.stderr_text(), HasSubstr("\"preempted\""));
  EXPECT_THAT(command.stdout_text(), HasSubstr("saved"));
  EXPECT_EQ(hold.Wait(seconds(20)), 0) << hold.stderr_text();
  EXPECT_EQ(waiter.Wait(seconds(20)), 0) << waiter.stderr_text();
}

TEST_F(SharingTest, APreemptedCommandThatIgnoresTheNoticeLosesItsSessionAfterTheGrace) {
  Process stubborn = Hold("alice", {"--ipus", "2", "--qos", "scavenger", "--", "sh", "-c",
                                    "trap '' TERM; exec sleep 60"});
  Process waiter = Waiter("bob", {"--ipus", "4", "--", "true"});
  EXPECT_EQ(waiter.Wait(seconds(30)), 0) << waiter.stderr_text();
  EXPECT_EQ(stubborn.Wait(seconds(30)), 11) << stubborn.stderr_text();  // ended by someone else
  EXPECT_THAT(stubborn.stderr_text(), HasSubstr("was preempted"));
}

TEST_F(SharingTest, ASessionEndsAtItsTimeLimitAndItsCommandIsStopped) {
  const auto start = std::chrono::steady_clock::now();
  Process held = Hold("carol", {"--ipus", "2", "--time-limit", "2s", "--", "sh", "-c",
                                "trap 'echo stopped; exit 0' TERM; while :; do sleep 0.1; done"});
  EXPECT_EQ(held.Wait(seconds(30)), 6) << held.stderr_text();  // deadline exceeded
  EXPECT_GE(std::chrono::steady_clock::now() - start, seconds(2));
  EXPECT_THAT(held.stderr_text(), HasSubstr("the time limit of 2s it asked for (--time-limit)"));
  EXPECT_THAT(held.stdout_text(), HasSubstr("stopped"));
  EXPECT_EQ(Cli("alice", {"info"}).json()["pod"]["free_ipus"], 4);  // given back
}

// Limits of an account as a whole: IPUs held at once by its users together,
// and IPU-hours in the rolling window (0.001 IPU-hours = 3.6 IPU-seconds).
constexpr const char* kLimitsConfig = R"({
  "pod": "POD4",
  "sharing": {
    "accounts": [{"name": "vision", "shares": 1, "users": ["alice", "carol"],
                  "limits": {"max_ipus": 2}},
                 {"name": "speech", "shares": 1, "users": ["bob"],
                  "limits": {"max_ipu_hours": 0.001}}]
  }
})";

class AccountLimitsTest : public SharingTest {
 protected:
  AccountLimitsTest() : SharingTest(kLimitsConfig) {}
};

TEST_F(AccountLimitsTest, AnAccountsIpusAreHeldTogether) {
  Process alice = Hold("alice", {"--ipus", "2"});
  // carol is in alice's account: two more IPUs are free, but not for vision.
  CliResult now = Cli("carol", {"attach", "--ipus", "1"});
  EXPECT_EQ(now.exit_code, 5) << now.out;
  EXPECT_THAT(now.json()["error"]["message"].get<std::string>(),
              HasSubstr("AccountMaxIpus: account vision holds 2 IPUs, the limit is 2"));
  EXPECT_EQ(Cli("bob", {"attach", "--ipus", "2", "--", "true"}).exit_code, 0);  // another account
  Process carol = Waiter("carol", {"--ipus", "1", "--", "true"});
  ASSERT_TRUE(QueueLengthIs(1));
  EXPECT_EQ(Queue()[0]["reason"], "AccountMaxIpus");
  alice.Signal(SIGINT);
  EXPECT_EQ(carol.Wait(seconds(20)), 0) << carol.stderr_text();
}

TEST_F(AccountLimitsTest, IpuHoursUsedInTheWindowHoldFurtherRequests) {
  // 2 IPUs for 2.5 s: 5 IPU-seconds, over speech's 3.6.
  EXPECT_EQ(Cli("bob", {"attach", "--ipus", "2", "--", "sleep", "2.5"}).exit_code, 0);
  CliResult over = Cli("bob", {"attach", "--ipus", "1"});
  EXPECT_EQ(over.exit_code, 5) << over.out;
  EXPECT_THAT(over.json()["error"]["message"].get<std::string>(),
              HasSubstr("AccountMaxIpuHours: account speech used 0.00 IPU-hours"));
  Process waiting = Waiter("bob", {"--ipus", "1", "--wait-timeout", "2", "--", "true"});
  ASSERT_TRUE(QueueLengthIs(1));
  EXPECT_EQ(Queue()[0]["reason"], "AccountMaxIpuHours");
  EXPECT_EQ(waiting.Wait(seconds(20)), 6);  // still held when its wait ran out
  EXPECT_EQ(Cli("alice", {"attach", "--ipus", "1", "--", "true"}).exit_code, 0);  // vision is not
}

}  // namespace
}  // namespace ipupod::testing
