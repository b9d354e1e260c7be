#include "device/kernels/softmax.h"

#include <cmath>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/device/kernels/test_util.h"

namespace ipupod::kernels {
namespace {

using testing::In;
using testing::Out;

TEST(SoftmaxTest, LastAxisMatchesFormula) {
  const std::vector<float> x = {1, 2, 3, 0, 0, 0};
  std::vector<float> out(6);
  const std::vector<int64_t> shape = {2, 3};
  ASSERT_TRUE(Softmax(In(x, shape), SoftmaxLayoutFor(shape, 1, false), Out(out, shape)).ok());
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(out[0], std::exp(1.0) / z, 1e-7);
  EXPECT_NEAR(out[2], std::exp(3.0) / z, 1e-7);
  EXPECT_NEAR(out[4], 1.0 / 3.0, 1e-7);
}

TEST(SoftmaxTest, StableForHugeLogitsAndMaskedEntries) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {1000.0f, 1001.0f, -inf};
  std::vector<float> out(3);
  const std::vector<int64_t> shape = {3};
  ASSERT_TRUE(Softmax(In(x, shape), SoftmaxLayoutFor(shape, 0, false), Out(out, shape)).ok());
  EXPECT_NEAR(out[0], 1.0 / (1.0 + std::exp(1.0)), 1e-7);
  EXPECT_EQ(out[2], 0.0f);
  ASSERT_TRUE(LogSoftmax(In(x, shape), SoftmaxLayoutFor(shape, 0, false), Out(out, shape)).ok());
  EXPECT_NEAR(out[1], -std::log1p(std::exp(-1.0)), 1e-6);
  EXPECT_TRUE(std::isinf(out[2]));
}

TEST(SoftmaxTest, MiddleAxisUsesStride) {
  // [2, 2] softmax over axis 0: columns normalise.
  const std::vector<float> x = {0, 1, 0, 3};
  std::vector<float> out(4);
  const std::vector<int64_t> shape = {2, 2};
  ASSERT_TRUE(Softmax(In(x, shape), SoftmaxLayoutFor(shape, 0, false), Out(out, shape)).ok());
  EXPECT_FLOAT_EQ(out[0], 0.5f);
  EXPECT_FLOAT_EQ(out[2], 0.5f);
  EXPECT_NEAR(out[1], 1.0 / (1.0 + std::exp(2.0)), 1e-7);
}

TEST(SoftmaxTest, Opset11FlattensFromAxis) {
  const std::vector<int64_t> shape = {2, 2};
  const SoftmaxLayout l = SoftmaxLayoutFor(shape, 0, true);
  EXPECT_EQ(l.outer, 1);
  EXPECT_EQ(l.n, 4);
  EXPECT_EQ(l.inner, 1);
  const std::vector<float> x = {0, 0, 0, 0};
  std::vector<float> out(4);
  ASSERT_TRUE(Softmax(In(x, shape), l, Out(out, shape)).ok());
  EXPECT_FLOAT_EQ(out[3], 0.25f);
}

TEST(SoftmaxTest, Errors) {
  const std::vector<float> x = {0, 0, 0, 0};
  std::vector<float> out(4);
  const std::vector<int64_t> shape = {2, 2};
  EXPECT_EQ(Softmax(In(x, shape), SoftmaxLayout{1, 3, 1}, Out(out, shape)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LogSoftmax(In(x, shape), SoftmaxLayoutFor(shape, 1, false), Out(out, {4})).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ipupod::kernels
