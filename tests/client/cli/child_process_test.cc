// Spawning attach's COMMAND and receiving signals on a watcher thread.
#include "client/cli/child_process.h"

#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/cli/signal_watcher.h"
#include <signal.h>
#include <unistd.h>

namespace ipupod::cli {
namespace {

using ::testing::HasSubstr;

// Polls the child (the watcher's Wait bounds each step) until it exits.
std::optional<int> WaitExit(ChildProcess& child, SignalWatcher& signals,
                            absl::Duration timeout = absl::Seconds(10)) {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (auto code = child.Poll()) return code;
    signals.Wait(absl::Milliseconds(20));
  }
  return child.Poll();
}

std::string TempPath(const char* name) {
  return absl::StrCat(::testing::TempDir(), "/", name, "-", getpid());
}

// One watcher for the whole binary: it blocks the signals in this thread
// before gtest or anything else starts threads that could receive them.
SignalWatcher& Signals() {
  static SignalWatcher* watcher = new SignalWatcher();
  return *watcher;
}

TEST(ChildProcessTest, ExitCodeIsReturned) {
  auto child = ChildProcess::Spawn({"/bin/sh", "-c", "exit 7"}, {});
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(WaitExit(*child, Signals()), 7);
  EXPECT_EQ(child->Poll(), 7) << "stays available";
}

TEST(ChildProcessTest, SearchesPathAndPassesTheEnvironment) {
  std::string out = TempPath("env");
  auto child =
      ChildProcess::Spawn({"sh", "-c", "echo \"$IPUPOD_SESSION $IPUPOD_IPUS\" > \"$OUT\""},
                          {{"IPUPOD_SESSION", "s1-2"}, {"IPUPOD_IPUS", "4,5"}, {"OUT", out}});
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(WaitExit(*child, Signals()), 0);
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "s1-2 4,5\n");
  std::remove(out.c_str());
}

TEST(ChildProcessTest, ChildHasSignalsUnblocked) {
  // Our thread blocks SIGTERM (the watcher); the child must not inherit that.
  auto child = ChildProcess::Spawn({"/bin/sleep", "30"}, {});
  ASSERT_TRUE(child.ok());
  child->Signal(SIGTERM);
  EXPECT_EQ(WaitExit(*child, Signals()), 128 + SIGTERM);
}

TEST(ChildProcessTest, MissingCommandIsNotFoundLikeAShell) {
  auto child = ChildProcess::Spawn({"ipupod-no-such-command-xyz"}, {});
  ASSERT_FALSE(child.ok());
  EXPECT_EQ(child.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(child.status().message(), HasSubstr("cannot run `ipupod-no-such-command-xyz`"));
  EXPECT_EQ(ExitCodeForSpawnError(child.status()), 127);
  EXPECT_EQ(ExitCodeForSpawnError(absl::PermissionDeniedError("x")), 126);
}

TEST(SignalWatcherTest, InterruptsAndChildExitsAreEvents) {
  SignalWatcher& signals = Signals();
  signals.Wait(absl::ZeroDuration());  // drop earlier events
  std::atomic<int> handled{0};
  signals.SetInterruptHandler([&](int signal, bool from_user) {
    if (signal == SIGTERM && from_user) ++handled;
  });
  kill(getpid(), SIGTERM);  // sent by a process: from_user
  SignalWatcher::Events events;
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (events.interrupt_signal == 0 && absl::Now() < deadline) {
    SignalWatcher::Events e = signals.Wait(absl::Seconds(1));
    if (e.interrupt_signal != 0) events = e;
  }
  EXPECT_EQ(events.interrupt_signal, SIGTERM);
  EXPECT_TRUE(events.interrupt_from_user);
  // The handler runs on the watcher thread just after the event is recorded.
  deadline = absl::Now() + absl::Seconds(10);
  while (handled.load() == 0 && absl::Now() < deadline) signals.Wait(absl::Milliseconds(5));
  EXPECT_EQ(handled.load(), 1);
  EXPECT_TRUE(signals.Interrupted());
  signals.SetInterruptHandler(nullptr);

  auto child = ChildProcess::Spawn({"/bin/true"}, {});
  ASSERT_TRUE(child.ok());
  bool saw_child = false;
  deadline = absl::Now() + absl::Seconds(10);
  while (!saw_child && absl::Now() < deadline) saw_child = signals.Wait(absl::Seconds(1)).child;
  EXPECT_TRUE(saw_child);
  EXPECT_EQ(WaitExit(*child, signals), 0);
}

}  // namespace
}  // namespace ipupod::cli

int main(int argc, char** argv) {
  ipupod::cli::Signals();  // before gtest (or anything) starts a thread
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
