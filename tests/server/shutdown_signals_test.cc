// ShutdownSignals turns SIGINT/SIGTERM into an event wherever the kernel
// delivers them: to a thread that existed before the handler was installed
// and never blocked anything (as OpenBLAS's workers), or to the process.
#include "server/shutdown_signals.h"

#include <atomic>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

namespace ipupod::server {
namespace {

// A thread that blocks no signal, started before Install(), running until told.
class BystanderThread {
 public:
  BystanderThread() {
    thread_ = std::thread([this] {
      sigset_t none;
      sigemptyset(&none);
      pthread_sigmask(SIG_SETMASK, &none, nullptr);
      started_ = true;
      while (!stop_) std::this_thread::yield();
    });
    while (!started_) std::this_thread::yield();
  }
  ~BystanderThread() {
    stop_ = true;
    thread_.join();
  }
  pthread_t handle() { return thread_.native_handle(); }

 private:
  std::atomic<bool> started_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(ShutdownSignalsTest, SigtermToAThreadStartedBeforeInstallIsReceived) {
  BystanderThread bystander;
  auto signals = ShutdownSignals::Install();
  ASSERT_TRUE(signals.ok()) << signals.status();
  ASSERT_EQ(pthread_kill(bystander.handle(), SIGTERM), 0);
  EXPECT_EQ((*signals)->Wait(absl::Seconds(10)), SIGTERM) << "and the process is still alive";
}

TEST(ShutdownSignalsTest, SigintToTheProcessIsReceived) {
  auto signals = ShutdownSignals::Install();
  ASSERT_TRUE(signals.ok()) << signals.status();
  ASSERT_EQ(kill(getpid(), SIGINT), 0);
  EXPECT_EQ((*signals)->Wait(absl::Seconds(10)), SIGINT);
  EXPECT_EQ(ShutdownSignals::Name(SIGINT), "SIGINT");
  EXPECT_EQ(ShutdownSignals::Name(SIGTERM), "SIGTERM");
}

TEST(ShutdownSignalsTest, InstallUnblocksTheSignalsAProcessWasStartedWith) {
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &term, nullptr), 0);  // as an inherited mask would
  auto signals = ShutdownSignals::Install();
  ASSERT_TRUE(signals.ok()) << signals.status();
  sigset_t now;
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &now), 0);
  EXPECT_EQ(sigismember(&now, SIGTERM), 0) << "SIGTERM is still blocked in the waiting thread";
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);
  EXPECT_EQ((*signals)->Wait(absl::Seconds(10)), SIGTERM);
}

TEST(ShutdownSignalsTest, WaitWithoutASignalTimesOut) {
  auto signals = ShutdownSignals::Install();
  ASSERT_TRUE(signals.ok()) << signals.status();
  const absl::Time start = absl::Now();
  EXPECT_EQ((*signals)->Wait(absl::Milliseconds(100)), std::nullopt);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
}

TEST(ShutdownSignalsTest, OneAtATimeAndTheOldHandlerComesBack) {
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction before {};
  ASSERT_EQ(sigaction(SIGTERM, &ignore, &before), 0);
  {
    auto first = ShutdownSignals::Install();
    ASSERT_TRUE(first.ok()) << first.status();
    auto second = ShutdownSignals::Install();
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(second.status().message(), ::testing::HasSubstr("already installed"));
  }
  struct sigaction now {};
  ASSERT_EQ(sigaction(SIGTERM, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
  sigaction(SIGTERM, &before, nullptr);
  EXPECT_TRUE(ShutdownSignals::Install().ok()) << "installable again once the first is gone";
}

}  // namespace
}  // namespace ipupod::server
