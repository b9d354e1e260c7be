#include "common/check.h"

#include <gtest/gtest.h>

#include "absl/status/status.h"

namespace ipupod {
namespace {

TEST(CheckTest, PassingChecksDoNothing) {
  int evaluated = 0;
  IPUPOD_CHECK(++evaluated == 1) << "never printed";
  IPUPOD_CHECK_OK(absl::OkStatus());
  EXPECT_EQ(evaluated, 1);  // the condition is evaluated exactly once
}

TEST(CheckTest, MessageIsEvaluatedOnlyOnFailure) {
  int message_built = 0;
  IPUPOD_CHECK(true) << ++message_built;
  EXPECT_EQ(message_built, 0);
}

TEST(CheckDeathTest, FailedCheckAbortsWithFileLineConditionAndMessage) {
  const int ipus = 3;
  EXPECT_DEATH(IPUPOD_CHECK(ipus % 2 == 0) << "block of " << ipus << " IPUs",
               "check_test.cc:[0-9]+: check failed: ipus % 2 == 0: block of 3 IPUs");
}

TEST(CheckDeathTest, FailedCheckOkNamesTheStatus) {
  EXPECT_DEATH(IPUPOD_CHECK_OK(absl::InternalError("pod state broken")) << "after attach",
               "check failed: .*is OK: INTERNAL: pod state broken after attach");
}

#if IPUPOD_DCHECK_IS_ON
TEST(CheckDeathTest, DcheckAbortsWhenOn) {
  EXPECT_DEATH(IPUPOD_DCHECK(1 + 1 == 3) << "arithmetic", "check failed: 1 \\+ 1 == 3: arithmetic");
}
#else
TEST(CheckTest, DcheckEvaluatesNothingWhenOff) {
  int evaluated = 0;
  IPUPOD_DCHECK(++evaluated == 0) << ++evaluated;
  IPUPOD_DCHECK_OK((++evaluated, absl::InternalError("not evaluated")));
  EXPECT_EQ(evaluated, 0);
}
#endif

}  // namespace
}  // namespace ipupod
