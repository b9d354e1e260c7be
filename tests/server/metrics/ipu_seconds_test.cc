#include "server/metrics/ipu_seconds.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace ipupod::metrics {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

scheduler::SessionView Running(const std::string& user, const std::string& account, int ipus,
                               absl::Time since) {
  scheduler::SessionView s;
  s.user = user;
  s.account = account;
  for (int i = 0; i < ipus; ++i) s.ipus.push_back(i);
  s.attached_unix_ms = absl::ToUnixMillis(since);
  return s;
}

TEST(IpuSecondsTest, RunningSessionsCountUntilNowEndedOnesForGood) {
  IpuSeconds counter(0);
  const std::vector<scheduler::SessionView> running = {Running("alice", "vision", 4, kT0)};
  std::vector<IpuSeconds::Sample> at10 = counter.Values(running, kT0 + absl::Seconds(10));
  ASSERT_EQ(at10.size(), 1u);
  EXPECT_EQ(at10[0].user, "alice");
  EXPECT_EQ(at10[0].account, "vision");
  EXPECT_DOUBLE_EQ(at10[0].ipu_seconds, 40);
  counter.OnSessionEnded("alice", "vision", 60);  // it ended at 15 s
  EXPECT_DOUBLE_EQ(counter.Values({}, kT0 + absl::Seconds(100))[0].ipu_seconds, 60);
}

// A scrape's estimate can pass a session's final charge (the scrape's clock
// ran on; the session ended just before it): the counter never goes back.
TEST(IpuSecondsTest, NeverDecreases) {
  IpuSeconds counter(0);
  const std::vector<scheduler::SessionView> running = {Running("bob", "bob", 1, kT0)};
  EXPECT_DOUBLE_EQ(counter.Values(running, kT0 + absl::Seconds(10))[0].ipu_seconds, 10);
  counter.OnSessionEnded("bob", "bob", 9.5);
  EXPECT_DOUBLE_EQ(counter.Values({}, kT0 + absl::Seconds(11))[0].ipu_seconds, 10);
  counter.OnSessionEnded("bob", "bob", 2);
  EXPECT_DOUBLE_EQ(counter.Values({}, kT0 + absl::Seconds(12))[0].ipu_seconds, 11.5);
}

TEST(IpuSecondsTest, PairsPastTheCapCountAsOther) {
  IpuSeconds counter(3);
  for (int i = 0; i < 10; ++i) counter.OnSessionEnded("user" + std::to_string(i), "a", 1);
  const std::vector<scheduler::SessionView> running = {Running("late", "a", 2, kT0)};
  std::vector<IpuSeconds::Sample> samples = counter.Values(running, kT0 + absl::Seconds(1));
  ASSERT_EQ(samples.size(), 4u);
  EXPECT_EQ(samples[0].user, "other");
  EXPECT_EQ(samples[0].account, "other");
  EXPECT_DOUBLE_EQ(samples[0].ipu_seconds, 7 + 2);  // users 3..9 and the running one
  EXPECT_EQ(samples[1].user, "user0");
  EXPECT_EQ(samples[3].user, "user2");
}

}  // namespace
}  // namespace ipupod::metrics
