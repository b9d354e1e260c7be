#include "device/kernels/reduce.h"

#include <cmath>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/device/kernels/test_util.h"

namespace ipupod::kernels {
namespace {

using ::testing::ElementsAre;
using testing::In;
using testing::Out;

// x[i][j][k] = 100 i + 10 j + k over [2, 3, 2].
std::vector<float> Cube() {
  std::vector<float> x;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) x.push_back(static_cast<float>(100 * i + 10 * j + k));
  return x;
}

TEST(ReduceTest, SumLastAxis) {
  const std::vector<float> x = Cube();
  std::vector<float> out(6);
  ASSERT_TRUE(
      Reduce(ReduceOp::kSum, In(x, {2, 3, 2}), std::vector<int64_t>{-1}, Out(out, {2, 3, 1})).ok());
  EXPECT_THAT(out, ElementsAre(1, 21, 41, 201, 221, 241));
}

TEST(ReduceTest, MeanMiddleAxisAndKeepdimsFree) {
  const std::vector<float> x = Cube();
  std::vector<float> out(4);
  ASSERT_TRUE(
      Reduce(ReduceOp::kMean, In(x, {2, 3, 2}), std::vector<int64_t>{1}, Out(out, {2, 2})).ok());
  EXPECT_THAT(out, ElementsAre(10, 11, 110, 111));
}

TEST(ReduceTest, ScatteredAxesAndAll) {
  const std::vector<float> x = Cube();
  std::vector<float> out(3);
  ASSERT_TRUE(
      Reduce(ReduceOp::kSum, In(x, {2, 3, 2}), std::vector<int64_t>{0, 2}, Out(out, {1, 3, 1}))
          .ok());
  EXPECT_THAT(out, ElementsAre(202, 242, 282));
  std::vector<float> all(1);
  ASSERT_TRUE(Reduce(ReduceOp::kMean, In(x, {2, 3, 2}), {}, Out(all, {})).ok());
  EXPECT_FLOAT_EQ(all[0], (6 * 100 + 2 * (0 + 10 + 20) * 2 + 6) / 12.0f);
  ASSERT_TRUE(
      Reduce(ReduceOp::kMax, In(x, {2, 3, 2}), std::vector<int64_t>{1, 2}, Out(out, {2})).ok());
  EXPECT_EQ(out[0], 21);
  EXPECT_EQ(out[1], 121);
}

TEST(ReduceTest, Errors) {
  const std::vector<float> x = Cube();
  std::vector<float> out(6);
  EXPECT_EQ(Reduce(ReduceOp::kSum, In(x, {2, 3, 2}), std::vector<int64_t>{3}, Out(out, {6})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      Reduce(ReduceOp::kSum, In(x, {2, 3, 2}), std::vector<int64_t>{1, -2}, Out(out, {4})).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Reduce(ReduceOp::kSum, In(x, {2, 3, 2}), std::vector<int64_t>{0}, Out(out, {5})).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ReduceTest, ShapeHelpers) {
  const std::vector<int64_t> axes = *NormalizeReduceAxes(std::vector<int64_t>{-1, 0}, 3);
  EXPECT_THAT(axes, ElementsAre(0, 2));
  EXPECT_THAT(ReducedShape(std::vector<int64_t>{2, 3, 4}, axes, true), ElementsAre(1, 3, 1));
  EXPECT_THAT(ReducedShape(std::vector<int64_t>{2, 3, 4}, axes, false), ElementsAre(3));
}

}  // namespace
}  // namespace ipupod::kernels
