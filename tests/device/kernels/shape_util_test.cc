#include "device/kernels/shape_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ipupod::kernels {
namespace {

using ::testing::ElementsAre;

TEST(ShapeUtilTest, NumElementsCountsAndRejects) {
  EXPECT_EQ(*NumElements(std::vector<int64_t>{}), 1);
  EXPECT_EQ(*NumElements(std::vector<int64_t>{2, 3, 4}), 24);
  EXPECT_EQ(*NumElements(std::vector<int64_t>{5, 0, 7}), 0);
  EXPECT_EQ(NumElements(std::vector<int64_t>{2, -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NumElements(std::vector<int64_t>{1 << 30, 1 << 30, 1 << 30}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ShapeUtilTest, BroadcastFollowsNumpy) {
  EXPECT_THAT(*BroadcastShapes(std::vector<int64_t>{2, 1, 4}, std::vector<int64_t>{3, 1}),
              ElementsAre(2, 3, 4));
  EXPECT_THAT(*BroadcastShapes(std::vector<int64_t>{}, std::vector<int64_t>{5}), ElementsAre(5));
  EXPECT_EQ(BroadcastShapes(std::vector<int64_t>{2, 3}, std::vector<int64_t>{4}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(BroadcastsTo(std::vector<int64_t>{3, 1}, std::vector<int64_t>{2, 3, 4}));
  EXPECT_FALSE(BroadcastsTo(std::vector<int64_t>{2, 3, 4}, std::vector<int64_t>{3, 4}));
}

TEST(ShapeUtilTest, NormalizeAxis) {
  EXPECT_EQ(*NormalizeAxis(-1, 3), 2);
  EXPECT_EQ(*NormalizeAxis(0, 3), 0);
  EXPECT_EQ(NormalizeAxis(3, 3).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NormalizeAxis(-4, 3).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ShapeUtilTest, StridesAndCheckShape) {
  EXPECT_THAT(RowMajorStrides(std::vector<int64_t>{2, 3, 4}), ElementsAre(12, 4, 1));
  EXPECT_TRUE(CheckShape("x", std::vector<int64_t>{2}, std::vector<int64_t>{2}).ok());
  const absl::Status s = CheckShape("x", std::vector<int64_t>{2}, std::vector<int64_t>{3});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("[2]"));
}

}  // namespace
}  // namespace ipupod::kernels
