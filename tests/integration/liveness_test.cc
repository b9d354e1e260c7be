// End to end: a session lives as long as its client. When the holder's
// process dies (SIGKILL) or stops answering (SIGSTOP: its connection goes
// silent), its IPUs return to the pool within the lease and the next waiter
// gets them. A server restart ends every session with a clear error.
#include <gtest/gtest.h>

#include "tests/integration/harness.h"
#include <signal.h>

namespace ipupod::testing {
namespace {

using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

Process HoldAll(const ServerUnderTest& server, nlohmann::json* grant) {
  Process holder = StartCli(server.address(), "alice", {"--json", "attach", "--ipus", "16"});
  auto doc = holder.ReadStdoutJson(seconds(15));
  EXPECT_TRUE(doc) << holder.stderr_text();
  if (doc) *grant = *doc;
  return holder;
}

bool QueueHasOneWaiter(const ServerUnderTest& server) {
  return Eventually(
      [&] {
        nlohmann::json q = RunCli(server.address(), "bob", {"--json", "queue"}).json();
        if (q.is_object() && q.contains("entries")) q = q["entries"];
        return q.is_array() && q.size() == 1;
      },
      seconds(10));
}

TEST(LivenessTest, WaiterGetsIpusWhenHolderProcessIsKilled) {
  ServerUnderTest server;
  nlohmann::json grant;
  Process holder = HoldAll(server, &grant);
  Process waiter = StartCli(server.address(), "bob", {"--json", "attach", "--wait", "--ipus", "4"});
  ASSERT_TRUE(QueueHasOneWaiter(server));

  auto killed_at = Clock::now();
  holder.Signal(SIGKILL);
  auto granted = waiter.ReadStdoutJson(seconds(10));
  ASSERT_TRUE(granted) << waiter.stderr_text();
  EXPECT_LT(Clock::now() - killed_at, seconds(10)) << "released within the default 10 s lease";
  EXPECT_EQ((*granted)["ipus"].size(), 4u);
}

TEST(LivenessTest, SilentClientLosesItsSessionWithinTheLease) {
  ServerUnderTest server({}, R"({"session_lease_seconds": 2})");
  nlohmann::json grant;
  Process holder = HoldAll(server, &grant);
  Process waiter =
      StartCli(server.address(), "bob", {"--json", "attach", "--wait", "--ipus", "16"});
  ASSERT_TRUE(QueueHasOneWaiter(server));

  auto stopped_at = Clock::now();
  holder.Signal(SIGSTOP);  // the process stays, its connection goes silent
  auto granted = waiter.ReadStdoutJson(seconds(15));
  ASSERT_TRUE(granted) << waiter.stderr_text();
  EXPECT_LT(Clock::now() - stopped_at, seconds(8)) << "lease 2 s plus keepalive slack";
  holder.Signal(SIGCONT);
  auto code = holder.Wait(seconds(15));
  ASSERT_TRUE(code);
  EXPECT_NE(*code, 0) << "the resumed holder learns its session is gone";
}

TEST(LivenessTest, ServerRestartEndsSessionsWithAClearError) {
  ServerUnderTest server;
  nlohmann::json grant;
  Process holder = HoldAll(server, &grant);
  std::string session = grant["session"];
  server.KillAndRestart();

  auto code = holder.Wait(seconds(20));
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 8) << holder.stderr_text();
  EXPECT_NE(holder.stderr_text().find("restart"), std::string::npos) << holder.stderr_text();

  CliResult show = RunCli(server.address(), "alice", {"--json", "session", "show", session});
  EXPECT_EQ(show.exit_code, 3);
  nlohmann::json info = RunCli(server.address(), "alice", {"--json", "info"}).json();
  for (const auto& ipu : info["ipus"]) EXPECT_EQ(ipu["state"], "idle");
}

}  // namespace
}  // namespace ipupod::testing
