#include "device/kernels/layernorm.h"

#include <cmath>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/device/kernels/test_util.h"

namespace ipupod::kernels {
namespace {

using testing::In;
using testing::Out;

TEST(LayerNormTest, NormalisesEachRow) {
  const std::vector<float> x = {1, 2, 3, 4, 10, 10, 10, 10};
  const std::vector<float> scale = {1, 1, 2, 2};
  const std::vector<float> bias = {0, 0, 0, 1};
  std::vector<float> y(8), mean(2), inv_std(2);
  ASSERT_TRUE(LayerNorm(In(x, {2, 4}), -1, In(scale, {4}), In(bias, {4}), 1e-5f, Out(y, {2, 4}),
                        mean.data(), inv_std.data())
                  .ok());
  // Row 0: mean 2.5, biased variance 1.25.
  const double r = 1.0 / std::sqrt(1.25 + 1e-5);
  EXPECT_NEAR(y[0], -1.5 * r, 1e-6);
  EXPECT_NEAR(y[2], 2 * 0.5 * r, 1e-6);
  EXPECT_NEAR(y[3], 2 * 1.5 * r + 1, 1e-6);
  EXPECT_FLOAT_EQ(mean[0], 2.5f);
  EXPECT_NEAR(inv_std[0], r, 1e-6);
  // Row 1 is constant: zeros plus bias.
  EXPECT_FLOAT_EQ(y[4], 0.0f);
  EXPECT_FLOAT_EQ(y[7], 1.0f);
  EXPECT_NEAR(inv_std[1], 1.0 / std::sqrt(1e-5), 1e-2);
}

TEST(LayerNormTest, OverTwoTrailingDimsWithoutBias) {
  const std::vector<float> x = {0, 2, 4, 6};
  const std::vector<float> scale = {1};
  std::vector<float> y(4);
  ASSERT_TRUE(LayerNorm(In(x, {1, 2, 2}), 1, In(scale, {1}), View<float>{nullptr, {}}, 0.0f,
                        Out(y, {1, 2, 2}), nullptr, nullptr)
                  .ok());
  const double r = 1.0 / std::sqrt(5.0);
  EXPECT_NEAR(y[0], -3 * r, 1e-6);
  EXPECT_NEAR(y[3], 3 * r, 1e-6);
}

TEST(LayerNormTest, Errors) {
  const std::vector<float> x(8, 1.0f);
  const std::vector<float> scale = {1, 1, 1};
  std::vector<float> y(8);
  EXPECT_EQ(LayerNorm(In(x, {2, 4}), -1, In(scale, {3}), View<float>{nullptr, {}}, 1e-5f,
                      Out(y, {2, 4}), nullptr, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LayerNorm(In(x, {2, 4}), 2, In(scale, {1}), View<float>{nullptr, {}}, 1e-5f,
                      Out(y, {2, 4}), nullptr, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LayerNorm(In(x, {2, 4}), -1, In(scale, {1}), View<float>{nullptr, {}}, 1e-5f,
                      Out(y, {8}), nullptr, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ipupod::kernels
