#include "device/kernels/batchnorm.h"

#include <cmath>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/device/kernels/test_util.h"

namespace ipupod::kernels {
namespace {

using ::testing::HasSubstr;
using testing::In;
using testing::Out;

// x [4, 2]: channel 0 = {1, 2, 3, 6} (mean 3, biased var 3.5, unbiased 14/3),
// channel 1 = {0, 0, 4, 4} (mean 2, biased var 4, unbiased 16/3).
const std::vector<float> kX = {1, 0, 2, 0, 3, 4, 6, 4};
const std::vector<float> kScale = {2, 0.5f};
const std::vector<float> kBias = {1, -1};
const std::vector<float> kMean = {1, 2};
const std::vector<float> kVar = {4, 0.25f};

TEST(BatchNormTest, InferenceUsesTheGivenStatistics) {
  std::vector<float> y(8);
  BatchNormOptions o;
  o.epsilon = 0.0f;
  ASSERT_TRUE(BatchNorm(In(kX, {4, 2}), In(kScale, {2}), In(kBias, {2}), In(kMean, {2}),
                        In(kVar, {2}), o, Out(y, {4, 2}))
                  .ok());
  // Channel 0: (x - 1) / 2 * 2 + 1 = x; channel 1: (x - 2) / 0.5 * 0.5 - 1 = x - 3.
  EXPECT_THAT(
      y, ::testing::Pointwise(::testing::FloatEq(), std::vector<float>{1, -3, 2, -3, 3, 1, 6, 1}));
}

TEST(BatchNormTest, TrainingUsesBatchStatisticsAndUpdatesRunningOnes) {
  std::vector<float> y(8), running_mean(2), running_var(2), saved_mean(2), saved_var(2);
  BatchNormOptions o;
  o.epsilon = 1e-5f;
  o.momentum = 0.75f;
  o.training = true;
  const BatchNormStatistics stats{running_mean.data(), running_var.data(), saved_mean.data(),
                                  saved_var.data()};
  ASSERT_TRUE(BatchNorm(In(kX, {4, 2}), In(kScale, {2}), In(kBias, {2}), In(kMean, {2}),
                        In(kVar, {2}), o, Out(y, {4, 2}), stats)
                  .ok());
  const double r0 = 1.0 / std::sqrt(3.5 + 1e-5), r1 = 1.0 / std::sqrt(4.0 + 1e-5);
  EXPECT_NEAR(y[0], (1 - 3) * r0 * 2 + 1, 1e-6);
  EXPECT_NEAR(y[6], (6 - 3) * r0 * 2 + 1, 1e-6);
  EXPECT_NEAR(y[1], (0 - 2) * r1 * 0.5 - 1, 1e-6);
  EXPECT_NEAR(y[5], (4 - 2) * r1 * 0.5 - 1, 1e-6);
  // running = input * momentum + batch * (1 - momentum), unbiased variance.
  EXPECT_NEAR(running_mean[0], 1 * 0.75 + 3 * 0.25, 1e-6);
  EXPECT_NEAR(running_mean[1], 2 * 0.75 + 2 * 0.25, 1e-6);
  EXPECT_NEAR(running_var[0], 4 * 0.75 + 14.0 / 3 * 0.25, 1e-6);
  EXPECT_NEAR(running_var[1], 0.25 * 0.75 + 16.0 / 3 * 0.25, 1e-6);
  EXPECT_FLOAT_EQ(saved_mean[0], 3);
  EXPECT_FLOAT_EQ(saved_mean[1], 2);
  EXPECT_FLOAT_EQ(saved_var[0], 3.5f);
  EXPECT_FLOAT_EQ(saved_var[1], 4);
}

// x [N, C, H, W] normalised with a naive 4-deep loop as the reference.
TEST(BatchNormTest, Rank4BothModesMatchNaiveLoops) {
  const int64_t N = 2, C = 3, H = 2, W = 3;
  std::vector<float> x(N * C * H * W);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.7 * i) * 3 + 0.1f * (i % 5);
  const std::vector<float> scale = {1.5f, -0.5f, 2}, bias = {0, 1, -2};
  const std::vector<float> mean = {0.5f, -1, 0}, var = {1, 2, 0.5f};
  const auto at = [&](int64_t n, int64_t c, int64_t h, int64_t w) {
    return ((n * C + c) * H + h) * W + w;
  };
  for (bool training : {false, true}) {
    SCOPED_TRACE(training);
    BatchNormOptions o;
    o.training = training;
    std::vector<float> y(x.size()), running_var(C);
    BatchNormStatistics stats;
    if (training) stats.running_var = running_var.data();
    ASSERT_TRUE(BatchNorm(In(x, {N, C, H, W}), In(scale, {C}), In(bias, {C}), In(mean, {C}),
                          In(var, {C}), o, Out(y, {N, C, H, W}), stats)
                    .ok());
    for (int64_t c = 0; c < C; ++c) {
      double m = mean[c], v = var[c];
      if (training) {
        double sum = 0, sq = 0;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t h = 0; h < H; ++h)
            for (int64_t w = 0; w < W; ++w) sum += x[at(n, c, h, w)];
        m = sum / (N * H * W);
        for (int64_t n = 0; n < N; ++n)
          for (int64_t h = 0; h < H; ++h)
            for (int64_t w = 0; w < W; ++w) sq += std::pow(x[at(n, c, h, w)] - m, 2);
        v = sq / (N * H * W);
        EXPECT_NEAR(running_var[c], var[c] * 0.9 + sq / (N * H * W - 1) * 0.1, 1e-5);
      }
      for (int64_t n = 0; n < N; ++n)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t w = 0; w < W; ++w) {
            const int64_t i = at(n, c, h, w);
            EXPECT_NEAR(y[i], (x[i] - m) / std::sqrt(v + 1e-5) * scale[c] + bias[c], 1e-5)
                << "element " << i;
          }
    }
  }
}

TEST(BatchNormTest, MomentsPerChannel) {
  std::vector<double> mean, var;
  BatchNormMoments(kX.data(), BatchNormLayout{4, 2, 1}, mean, var);
  EXPECT_THAT(mean, ::testing::ElementsAre(3, 2));
  EXPECT_THAT(var, ::testing::ElementsAre(3.5, 4));
  auto layout = BatchNormLayoutOf(std::vector<int64_t>{2, 3, 4, 5});
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->outer, 2);
  EXPECT_EQ(layout->channels, 3);
  EXPECT_EQ(layout->inner, 20);
  EXPECT_EQ(layout->per_channel(), 40);
}

TEST(BatchNormTest, Errors) {
  std::vector<float> y(8), stat(2);
  const BatchNormOptions inference;
  BatchNormOptions training;
  training.training = true;
  const std::vector<float> three = {1, 1, 1};
  auto run = [&](View<float> x, View<float> scale, const BatchNormOptions& o,
                 MutableView<float> out, BatchNormStatistics stats = {}) {
    return BatchNorm(x, scale, In(kBias, {2}), In(kMean, {2}), In(kVar, {2}), o, out, stats);
  };
  absl::Status s = run(In(kX, {8}), In(kScale, {2}), inference, Out(y, {8}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("rank >= 2"));
  s = run(In(kX, {4, 2}), In(three, {3}), inference, Out(y, {4, 2}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("scale has shape [3]; it must be [C] = [2]"));
  s = run(In(kX, {4, 2}), In(kScale, {2}), inference, Out(y, {8}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = run(In(kX, {1, 2, 1}), In(kScale, {2}), training, Out(y, {1, 2, 1}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("Expected more than 1 value per channel when training"));
  EXPECT_TRUE(run(In(kX, {1, 2, 1}), In(kScale, {2}), inference, Out(y, {1, 2, 1})).ok());
  s = run(In(kX, {4, 2}), In(kScale, {2}), inference, Out(y, {4, 2}), {stat.data()});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("only in training mode"));
}

}  // namespace
}  // namespace ipupod::kernels
