#include "device/kernels/ctc.h"

#include <cmath>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ipupod::kernels {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Log probabilities [T, C] of one sequence from probabilities.
std::vector<float> Logs(const std::vector<std::vector<double>>& p) {
  std::vector<float> out;
  for (const auto& step : p) {
    for (double v : step) out.push_back(static_cast<float>(std::log(v)));
  }
  return out;
}

std::vector<CtcPath> Decode(const std::vector<std::vector<double>>& p, CtcBeamSearchOptions o) {
  const std::vector<float> logs = Logs(p);
  const int64_t classes = static_cast<int64_t>(p[0].size());
  auto paths = CtcBeamSearch(logs.data(), static_cast<int64_t>(p.size()), classes, classes, o);
  EXPECT_TRUE(paths.ok()) << paths.status();
  return *paths;
}

TEST(CtcTest, OneStepRanksEveryLabelAndTheEmptyPath) {
  auto paths = Decode({{0.5, 0.3, 0.2}}, {.blank = 0, .beam_width = 3, .top_paths = 3});
  ASSERT_EQ(paths.size(), 3u);
  EXPECT_TRUE(paths[0].labels.empty());
  EXPECT_THAT(paths[0].log_prob, DoubleNear(std::log(0.5), 1e-6));
  EXPECT_THAT(paths[1].labels, ElementsAre(1));
  EXPECT_THAT(paths[2].labels, ElementsAre(2));
  EXPECT_THAT(paths[2].log_prob, DoubleNear(std::log(0.2), 1e-6));
}

TEST(CtcTest, RepeatsCollapseUnlessABlankSeparatesThem) {
  // blank 0, label 1: [1] = 1 1 + 1 _ + _ 1; [] = _ _.
  auto two = Decode({{0.6, 0.4}, {0.3, 0.7}}, {.blank = 0, .beam_width = 4, .top_paths = 2});
  ASSERT_EQ(two.size(), 2u);
  EXPECT_THAT(two[0].labels, ElementsAre(1));
  EXPECT_THAT(two[0].log_prob, DoubleNear(std::log(0.4 * 0.7 + 0.4 * 0.3 + 0.6 * 0.7), 1e-6));
  EXPECT_THAT(two[1].log_prob, DoubleNear(std::log(0.6 * 0.3), 1e-6));
  // Three steps: [1 1] only as 1 _ 1.
  auto three =
      Decode({{0.1, 0.9}, {0.8, 0.2}, {0.1, 0.9}}, {.blank = 0, .beam_width = 8, .top_paths = 3});
  ASSERT_GE(three.size(), 2u);
  EXPECT_THAT(three[0].labels, ElementsAre(1, 1));
  EXPECT_THAT(three[0].log_prob, DoubleNear(std::log(0.9 * 0.8 * 0.9), 1e-6));
  EXPECT_THAT(three[1].labels, ElementsAre(1));
}

TEST(CtcTest, TheBlankMayBeAnyClass) {
  auto paths = Decode({{0.2, 0.1, 0.7}}, {.blank = 2, .beam_width = 2, .top_paths = 2});
  EXPECT_TRUE(paths[0].labels.empty());
  EXPECT_THAT(paths[1].labels, ElementsAre(0));
}

TEST(CtcTest, TiesGoToTheSmallerPrefix) {
  auto paths = Decode({{1.0 / 3, 1.0 / 3, 1.0 / 3}}, {.beam_width = 3, .top_paths = 3});
  EXPECT_TRUE(paths[0].labels.empty());
  EXPECT_THAT(paths[1].labels, ElementsAre(1));
  EXPECT_THAT(paths[2].labels, ElementsAre(2));
}

TEST(CtcTest, ANarrowBeamKeepsOnlyTheBestPrefixes) {
  // [2] (2 2 + _ 2 + 2 _ = 0.44) beats [1 2] (0.40), but step 1 favours [1]: one beam
  // never sees [2].
  const std::vector<std::vector<double>> p = {{0.1, 0.5, 0.4}, {0.1, 0.1, 0.8}};
  EXPECT_THAT(Decode(p, {.beam_width = 1, .top_paths = 1})[0].labels, ElementsAre(1, 2));
  const std::vector<CtcPath> wide = Decode(p, {.beam_width = 10, .top_paths = 1});
  EXPECT_THAT(wide[0].labels, ElementsAre(2));
  EXPECT_THAT(wide[0].log_prob, DoubleNear(std::log(0.44), 1e-6));
  EXPECT_EQ(Decode(p, {.beam_width = 10, .top_paths = 5}).size(), 5u);
}

TEST(CtcTest, LengthZeroHasOnlyTheEmptyPath) {
  const std::vector<float> logs = Logs({{0.5, 0.5}});
  auto paths = CtcBeamSearch(logs.data(), 0, 2, 2, {.top_paths = 2});
  ASSERT_TRUE(paths.ok());
  ASSERT_EQ(paths->size(), 1u);
  EXPECT_TRUE((*paths)[0].labels.empty());
  EXPECT_EQ((*paths)[0].log_prob, 0);
}

TEST(CtcTest, BadOptionsAreInvalidArguments) {
  const std::vector<float> logs = Logs({{0.5, 0.5}});
  auto blank = CtcBeamSearch(logs.data(), 1, 2, 2, {.blank = 2});
  EXPECT_EQ(blank.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(blank.status().message(), HasSubstr("blank class 2 is not one of the 2 classes"));
  auto paths = CtcBeamSearch(logs.data(), 1, 2, 2, {.beam_width = 2, .top_paths = 3});
  EXPECT_THAT(paths.status().message(), HasSubstr("top_paths <= beam_width"));
  EXPECT_EQ(CtcBeamSearch(logs.data(), 1, 2, 2, {.beam_width = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(CtcBeamSearch(logs.data(), -1, 2, 2, {}).status().message(),
              HasSubstr("sequence length -1 is negative"));
}

}  // namespace
}  // namespace ipupod::kernels
