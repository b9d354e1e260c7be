#include "scheduler/sharing/priority.h"

#include <gtest/gtest.h>

namespace ipupod::sharing {
namespace {

TEST(PriorityTest, FairShareIsOneUnusedAHalfAtItsShareAndFallsBeyond) {
  EXPECT_DOUBLE_EQ(FairShareFactor(0, 0.25), 1.0);
  EXPECT_DOUBLE_EQ(FairShareFactor(0.25, 0.25), 0.5);
  EXPECT_DOUBLE_EQ(FairShareFactor(0.5, 0.25), 0.25);
  EXPECT_DOUBLE_EQ(FairShareFactor(0.5, 0), 0.0);  // an account without shares
}

TEST(PriorityTest, FactorsAndTheWeightedSum) {
  PriorityWeights w;  // age 1000, fair share 10000, size 100, QoS 10000; age_max 24 h
  PriorityInputs in;
  in.waited = absl::Hours(6);
  in.usage_fraction = 0.5;
  in.shares_fraction = 0.5;
  in.ipus = 4;
  in.pod_ipus = 16;
  in.qos_priority = 100;
  in.max_qos_priority = 1000;
  const Factors f = ComputeFactors(w, in);
  EXPECT_DOUBLE_EQ(f.age, 0.25);
  EXPECT_DOUBLE_EQ(f.fair_share, 0.5);
  EXPECT_DOUBLE_EQ(f.size, 0.25);
  EXPECT_DOUBLE_EQ(f.qos, 0.1);
  EXPECT_DOUBLE_EQ(Priority(w, f), 1000 * 0.25 + 10000 * 0.5 + 100 * 0.25 + 10000 * 0.1);
  in.waited = absl::Hours(48);
  EXPECT_DOUBLE_EQ(ComputeFactors(w, in).age, 1.0);  // capped
  in.max_qos_priority = 0;
  EXPECT_DOUBLE_EQ(ComputeFactors(w, in).qos, 0.0);
}

}  // namespace
}  // namespace ipupod::sharing
