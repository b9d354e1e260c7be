// End to end: attach, the wait queue and its policy (FCFS with conservative
// backfill), auto-round, timeouts, cancellation and `attach -- COMMAND`,
// through the ipupod CLI against a real ipupodd (POD16, open mode).
#include <algorithm>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/integration/harness.h"
#include <signal.h>

namespace ipupod::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class AttachQueueTest : public ::testing::Test {
 protected:
  CliResult Cli(const std::string& user, std::vector<std::string> args) {
    args.insert(args.begin(), "--json");
    return RunCli(server_.address(), user, args);
  }
  // Starts `ipupod --json attach ARGS` and waits for its grant document.
  Process Hold(const std::string& user, std::vector<std::string> args, nlohmann::json* grant) {
    args.insert(args.begin(), {"--json", "attach"});
    Process p = StartCli(server_.address(), user, args);
    auto doc = p.ReadStdoutJson(seconds(15));
    EXPECT_TRUE(doc) << p.stderr_text();
    if (doc) *grant = *doc;
    return p;
  }
  Process StartWaiter(const std::string& user, std::vector<std::string> args) {
    args.insert(args.begin(), {"--json", "attach", "--wait"});
    return StartCli(server_.address(), user, args);
  }
  nlohmann::json Queue() {
    nlohmann::json doc = Cli("alice", {"queue"}).json();
    return doc.is_array() ? doc : doc.at("entries");
  }
  bool QueueLengthIs(size_t n) {
    return Eventually([&] { return Queue().size() == n; }, seconds(10));
  }
  static std::vector<int> Ipus(const nlohmann::json& grant) {
    return grant.at("ipus").get<std::vector<int>>();
  }
  ServerUnderTest server_;
};

TEST_F(AttachQueueTest, GrantIsExclusiveAlignedAndVisibleInInfo) {
  nlohmann::json grant;
  Process holder = Hold("alice", {"--ipus", "4"}, &grant);
  std::vector<int> ipus = Ipus(grant);
  ASSERT_EQ(ipus.size(), 4u);
  EXPECT_EQ(ipus[0] % 4, 0);
  EXPECT_EQ(grant["device_id"], 24 + ipus[0] / 4);
  std::string session = grant["session"];

  nlohmann::json info = Cli("bob", {"info"}).json();
  ASSERT_EQ(info["ipus"].size(), 16u);
  for (int id : ipus) {
    EXPECT_EQ(info["ipus"][id]["state"], "attached");
    EXPECT_EQ(info["ipus"][id]["session"], session);
    EXPECT_EQ(info["ipus"][id]["owner"], "alice");
  }
  holder.Signal(SIGINT);
  ASSERT_EQ(holder.Wait(seconds(10)), 0);
  info = Cli("bob", {"info"}).json();
  for (int id : ipus) EXPECT_EQ(info["ipus"][id]["state"], "idle");
}

TEST_F(AttachQueueTest, NonPowerOfTwoNeedsAutoRoundWhichReportsIdleExtras) {
  CliResult refused = Cli("alice", {"attach", "--ipus", "3"});
  EXPECT_EQ(refused.exit_code, 9);
  EXPECT_NE(refused.json()["error"]["message"].get<std::string>().find("auto-round"),
            std::string::npos);

  nlohmann::json grant;
  Process holder = Hold("alice", {"--ipus", "3", "--auto-round"}, &grant);
  EXPECT_EQ(Ipus(grant).size(), 4u);
  ASSERT_EQ(grant["idle_ipus"].size(), 1u);
  EXPECT_EQ(grant["idle_ipus"][0], Ipus(grant)[3]);
}

TEST_F(AttachQueueTest, RequestLargerThanThePodFailsAtOnceEvenWithWait) {
  CliResult r = Cli("alice", {"attach", "--ipus", "32", "--wait"});
  EXPECT_EQ(r.exit_code, 9);
  EXPECT_TRUE(QueueLengthIs(0));
}

TEST_F(AttachQueueTest, NoFitWithoutWaitNamesTheHolders) {
  nlohmann::json grant;
  Process holder = Hold("alice", {"--ipus", "16"}, &grant);
  CliResult r = Cli("bob", {"attach", "--ipus", "1"});
  EXPECT_EQ(r.exit_code, 5);
  std::string message = r.json()["error"]["message"];
  EXPECT_NE(message.find(grant["session"].get<std::string>()), std::string::npos) << message;
  EXPECT_NE(message.find("alice"), std::string::npos) << message;
}

TEST_F(AttachQueueTest, WaiterIsQueuedWithVisiblePositionAndGetsIpusOnRelease) {
  nlohmann::json grant;
  Process holder = Hold("alice", {"--ipus", "16"}, &grant);
  Process first = StartWaiter("bob", {"--ipus", "8"});
  ASSERT_TRUE(QueueLengthIs(1));
  Process second = StartWaiter("carol", {"--ipus", "8"});
  ASSERT_TRUE(QueueLengthIs(2));
  nlohmann::json queue = Queue();
  EXPECT_EQ(queue[0]["position"], 1);
  EXPECT_EQ(queue[0]["user"], "bob");
  EXPECT_EQ(queue[1]["position"], 2);
  EXPECT_EQ(queue[1]["user"], "carol");

  holder.Signal(SIGINT);
  auto first_grant = first.ReadStdoutJson(seconds(10));
  auto second_grant = second.ReadStdoutJson(seconds(10));
  ASSERT_TRUE(first_grant && second_grant) << first.stderr_text() << second.stderr_text();
  std::set<int> all;
  for (int id : Ipus(*first_grant)) all.insert(id);
  for (int id : Ipus(*second_grant)) all.insert(id);
  EXPECT_EQ(all.size(), 16u) << "two disjoint eights";
  EXPECT_TRUE(QueueLengthIs(0));
}

TEST_F(AttachQueueTest, LaterSmallRequestMayNotTakeIpusReservedForTheHead) {
  nlohmann::json a, b;
  Process eight = Hold("alice", {"--ipus", "8"}, &a);  // 0-7
  Process four = Hold("alice", {"--ipus", "4"}, &b);   // 8-11, free: 12-15
  ASSERT_EQ(Ipus(a)[0], 0);
  ASSERT_EQ(Ipus(b)[0], 8);
  Process head = StartWaiter("bob", {"--ipus", "8"});  // reserves 8-15
  ASSERT_TRUE(QueueLengthIs(1));
  CliResult jump = Cli("carol", {"attach", "--ipus", "4"});
  EXPECT_EQ(jump.exit_code, 5) << "12-15 are free but reserved for the head: " << jump.out;

  four.Signal(SIGINT);
  auto granted = head.ReadStdoutJson(seconds(10));
  ASSERT_TRUE(granted) << head.stderr_text();
  EXPECT_EQ(Ipus(*granted)[0], 8);
}

TEST_F(AttachQueueTest, LaterSmallRequestBackfillsOntoIpusTheHeadCannotUse) {
  nlohmann::json a, b, c;
  Process h1 = Hold("alice", {"--ipus", "4"}, &a);  // 0-3
  Process h2 = Hold("alice", {"--ipus", "2"}, &b);  // 4-5
  Process h3 = Hold("alice", {"--ipus", "4"}, &c);  // 8-11; free: 6-7, 12-15
  ASSERT_EQ(Ipus(b)[0], 4);
  ASSERT_EQ(Ipus(c)[0], 8);
  Process head = StartWaiter("bob", {"--ipus", "8"});  // reserves 8-15 (fewest in use)
  ASSERT_TRUE(QueueLengthIs(1));
  nlohmann::json d;
  Process backfill = Hold("carol", {"--ipus", "2"}, &d);
  EXPECT_EQ(Ipus(d), (std::vector<int>{6, 7}));
  EXPECT_TRUE(QueueLengthIs(1)) << "the head still waits";
}

TEST_F(AttachQueueTest, WaitTimeoutEndsWithDeadlineExceededAndLeavesTheQueue) {
  nlohmann::json grant;
  Process holder = Hold("alice", {"--ipus", "16"}, &grant);
  CliResult r = Cli("bob", {"attach", "--ipus", "4", "--wait", "--wait-timeout", "1"});
  EXPECT_EQ(r.exit_code, 6);
  EXPECT_EQ(r.json()["error"]["code"], "DEADLINE_EXCEEDED");
  EXPECT_TRUE(QueueLengthIs(0));
}

TEST_F(AttachQueueTest, InterruptedWaiterLeavesTheQueueAtOnce) {
  nlohmann::json grant;
  Process holder = Hold("alice", {"--ipus", "16"}, &grant);
  Process waiter = StartWaiter("bob", {"--ipus", "4"});
  ASSERT_TRUE(QueueLengthIs(1));
  waiter.Signal(SIGINT);
  EXPECT_EQ(waiter.Wait(seconds(5)), 130);
  EXPECT_TRUE(QueueLengthIs(0));
}

TEST_F(AttachQueueTest, CommandRunsWithSessionAndItsExitCodeIsReturned) {
  CliResult r = RunCli(server_.address(), "alice",
                       {"attach", "--ipus", "2", "--", "/bin/sh", "-c",
                        "test -n \"$IPUPOD_SESSION\" && echo \"held $IPUPOD_SESSION\" && exit 7"});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_NE(r.out.find("held s"), std::string::npos) << r.out;
  nlohmann::json info = Cli("alice", {"info"}).json();
  for (const auto& ipu : info["ipus"]) EXPECT_EQ(ipu["state"], "idle");
}

TEST_F(AttachQueueTest, ALabelIsShownToItsOwnerAndAdminsOnlyAndNeverHoldsArguments) {
  Process holder = StartCli(
      server_.address(), "alice",
      {"attach", "--ipus", "16", "--", "/bin/sh", "-c", "sleep 60", "sh", "--db-password=hunter2"});
  ASSERT_TRUE(Eventually([&] { return Cli("alice", {"info"}).json()["sessions"].size() == 1; },
                         seconds(15)))
      << holder.stderr_text();
  Process waiter = StartWaiter("bob", {"--ipus", "4", "--", "/usr/bin/env", "TOKEN=bob-secret"});
  ASSERT_TRUE(QueueLengthIs(1));
  for (const std::string& user : {std::string("alice"), std::string("bob"), std::string("admin")}) {
    const CliResult info = Cli(user, {"info"});
    const CliResult queue = Cli(user, {"queue"});
    EXPECT_EQ(info.out.find("hunter2"), std::string::npos) << user << ": " << info.out;
    EXPECT_EQ(queue.out.find("bob-secret"), std::string::npos) << user << ": " << queue.out;
    const std::string session_label = info.json()["sessions"][0]["client"];
    const std::string waiter_label = queue.json()["entries"][0]["client"];
    EXPECT_EQ(session_label.empty(), user == "bob") << user << ": " << session_label;
    EXPECT_EQ(waiter_label.empty(), user == "alice") << user << ": " << waiter_label;
    if (!session_label.empty()) {
      EXPECT_THAT(session_label, ::testing::EndsWith(": sh"));
    }
    if (!waiter_label.empty()) {
      EXPECT_THAT(waiter_label, ::testing::EndsWith(": env"));
    }
  }
  holder.Signal(SIGINT);
  waiter.Signal(SIGINT);
  holder.Wait(seconds(10));
  waiter.Wait(seconds(10));
}

TEST_F(AttachQueueTest, ALongQueueListsItsHeadAndHowManyMoreWait) {
  nlohmann::json grant;
  Process holder = Hold("alice", {"--ipus", "16"}, &grant);
  std::vector<Process> waiters;
  for (int i = 0; i < 3; ++i) waiters.push_back(StartWaiter("bob", {"--ipus", "1"}));
  ASSERT_TRUE(QueueLengthIs(3));  // --json: every entry by default
  const CliResult text = RunCli(server_.address(), "bob", {"queue", "--limit", "2"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, ::testing::HasSubstr("... and 1 more waiting (3 in all); "
                                             "`ipupod queue --all` lists every one"));
  EXPECT_EQ(std::count(text.out.begin(), text.out.end(), '\n'), 4) << text.out;  // header, 2, hint
  const CliResult all = RunCli(server_.address(), "bob", {"queue", "--all"});
  EXPECT_EQ(all.out.find("more waiting"), std::string::npos) << all.out;
  EXPECT_EQ(std::count(all.out.begin(), all.out.end(), '\n'), 4) << all.out;  // header, 3
  const nlohmann::json head = Cli("bob", {"queue", "--limit", "2"}).json();
  ASSERT_EQ(head["entries"].size(), 2u) << head;
  EXPECT_EQ(head["entries"][1]["position"], 2);
  EXPECT_EQ(head["total"], 3);
  EXPECT_EQ(Cli("bob", {"queue", "--limit", "0"}).exit_code, 2);  // a usage error
  holder.Signal(SIGINT);
  ASSERT_EQ(holder.Wait(seconds(10)), 0);
  for (Process& w : waiters) {
    w.Signal(SIGINT);
    w.Wait(seconds(10));
  }
}

TEST_F(AttachQueueTest, CommandEndingIsLoggedAsANormalEndNotAnError) {
  CliResult r = RunCli(server_.address(), "alice", {"attach", "--ipus", "1", "--", "true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Process& server = server_.process();
  // The CLI holds its session with Hold and ends it by closing its side.
  EXPECT_TRUE(server.WaitForStderr("method=Hold code=OK", seconds(10)));
  EXPECT_TRUE(server.WaitForStderr("ended=\"session s1-", seconds(10)));
  EXPECT_TRUE(server.WaitForStderr("released by its holder", seconds(10)));
  EXPECT_EQ(server.stderr_text().find("method=Hold code=ABORTED"), std::string::npos)
      << server.stderr_text();
  EXPECT_EQ(server.stderr_text().find("method=Hold code=CANCELLED"), std::string::npos)
      << server.stderr_text();
}

TEST_F(AttachQueueTest, DetachByOwnerEndsTheHoldersSessionOthersAreRefused) {
  nlohmann::json grant;
  Process holder = Hold("alice", {"--ipus", "2"}, &grant);
  std::string session = grant["session"];
  EXPECT_EQ(Cli("bob", {"detach", session}).exit_code, 4);
  EXPECT_EQ(Cli("bob", {"detach", "s999-1"}).exit_code, 3);
  EXPECT_EQ(Cli("alice", {"detach", session}).exit_code, 0);
  EXPECT_EQ(holder.Wait(seconds(10)), 11);
}

}  // namespace
}  // namespace ipupod::testing
