#include "scheduler/sharing/usage.h"

#include <gtest/gtest.h>

namespace ipupod::sharing {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

TEST(DecayedUsageTest, HalvesEveryHalfLifeAndSums) {
  DecayedUsage u(absl::Hours(1));
  u.Add("a", 100, kT0);
  EXPECT_DOUBLE_EQ(u.Value("a", kT0), 100);
  EXPECT_DOUBLE_EQ(u.Value("a", kT0 + absl::Hours(1)), 50);
  u.Add("a", 50, kT0 + absl::Hours(1));
  EXPECT_DOUBLE_EQ(u.Value("a", kT0 + absl::Hours(2)), 50);
  u.Add("b", 10, kT0 + absl::Hours(2));
  EXPECT_DOUBLE_EQ(u.Total(kT0 + absl::Hours(2)), 60);
  EXPECT_DOUBLE_EQ(u.Value("nobody", kT0), 0);
}

TEST(DecayedUsageTest, PruneForgetsWhatHasDecayedAway) {
  DecayedUsage u(absl::Hours(1));
  u.Add("a", 1, kT0);
  u.Add("b", 1e9, kT0);
  u.Prune(kT0 + absl::Hours(40));  // a: 2^-40, b: still about 1e-3
  EXPECT_EQ(u.size(), 1u);
  EXPECT_EQ(u.Keys(), std::vector<std::string>{"b"});
}

TEST(WindowUsageTest, CountsOnlyTheWindow) {
  WindowUsage u(absl::Hours(24));  // buckets of one hour
  u.Add("a", 10, kT0);
  u.Add("a", 5, kT0 + absl::Hours(12));
  EXPECT_DOUBLE_EQ(u.Value("a", kT0 + absl::Hours(12)), 15);
  EXPECT_DOUBLE_EQ(u.Value("a", kT0 + absl::Hours(25)), 5);
  EXPECT_DOUBLE_EQ(u.Value("a", kT0 + absl::Hours(37)), 0);
  u.Prune(kT0 + absl::Hours(37));
  EXPECT_EQ(u.size(), 0u);
}

TEST(WindowUsageTest, TellsWhenUsageFallsBelowATarget) {
  WindowUsage u(absl::Hours(24));
  u.Add("a", 10, kT0);
  u.Add("a", 5, kT0 + absl::Hours(12));
  const absl::Time now = kT0 + absl::Hours(13);
  EXPECT_EQ(u.TimeUntilAtMost("a", 20, now), now);
  const absl::Time when = u.TimeUntilAtMost("a", 6, now);  // the first 10 must leave
  EXPECT_GT(when, kT0 + absl::Hours(23));
  EXPECT_LE(when, kT0 + absl::Hours(25));
  EXPECT_DOUBLE_EQ(u.Value("a", when), 5);
}

}  // namespace
}  // namespace ipupod::sharing
