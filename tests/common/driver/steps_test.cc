// Unit tests of common/driver/steps.h: slicing steps out of a data set and
// concatenating their outputs.
#include "common/driver/steps.h"

#include <gtest/gtest.h>

#include "tests/support/tensors.h"

namespace ipupod::driver {
namespace {

using test_support::Iota;

TEST(StepInputsTest, CutsOneStepOfEveryInput) {
  StepPlan plan{{{"a", Iota({6, 2})}, {"b", Iota({6})}}, 6, 2, 3, {}};
  auto step = StepInputs(plan, 1);
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_EQ(step->size(), 2u);
  EXPECT_EQ((*step)[0].second.shape(), (tensor::Shape{2, 2}));
  EXPECT_EQ((*step)[0].second.values<float>()[0], 4.0f);
  EXPECT_EQ((*step)[1].second.values<float>()[1], 3.0f);
}

TEST(OutputAccumulatorTest, ConcatenatesAlongDimZero) {
  OutputAccumulator acc;
  ASSERT_TRUE(acc.Append({{"y", Iota({2, 2})}}).ok());
  ASSERT_TRUE(acc.Append({{"y", Iota({2, 2})}}).ok());
  auto out = acc.Finish();
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].second.shape(), (tensor::Shape{4, 2}));
  EXPECT_EQ((*out)[0].second.values<float>()[5], 1.0f);
  EXPECT_EQ(acc.Append({{"y", Iota({2, 3})}}).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(acc.Append({{"z", Iota({2, 2})}}).code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace ipupod::driver
