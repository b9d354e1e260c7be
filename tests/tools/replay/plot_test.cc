// The SVG plot: time-weighted buckets, the two labelled panels, one line per
// policy, and the file errors.
#include "tools/replay/plot.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/temp_dir.h"

namespace ipupod::replay {
namespace {

using ::testing::HasSubstr;

size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(PlotTest, BucketsAreTimeWeightedMeansOfTheStepFunction) {
  // Queue 4 over [0, 10), 0 over [10, 30), 2 over [30, 40); nothing after 40.
  const std::vector<TimelinePoint> timeline = {{0, 4, 1}, {10, 0, 3}, {30, 2, 0}};
  const std::vector<PlotBucket> b = Bucketize(timeline, 40, 80, 4);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_DOUBLE_EQ(b[0].start_s, 0);
  EXPECT_DOUBLE_EQ(b[0].end_s, 20);
  EXPECT_DOUBLE_EQ(b[0].queue_length, (4 * 10 + 0 * 10) / 20.0);
  EXPECT_DOUBLE_EQ(b[0].busy_ipus, (1 * 10 + 3 * 10) / 20.0);
  EXPECT_DOUBLE_EQ(b[1].queue_length, (0 * 10 + 2 * 10) / 20.0);
  EXPECT_DOUBLE_EQ(b[1].busy_ipus, 3 * 10 / 20.0);
  EXPECT_DOUBLE_EQ(b[2].queue_length, 0);
  EXPECT_DOUBLE_EQ(b[3].busy_ipus, 0);
  EXPECT_TRUE(Bucketize(timeline, 40, 0, 4).empty());
}

PlotInput TwoPolicies() {
  return PlotInput{"a,b on POD4",
                   4,
                   {PlotSeries{"fifo", {{0, 3, 4}, {3600, 0, 2}}, 7200},
                    PlotSeries{"backfill", {{0, 1, 4}, {1800, 0, 1}}, 5400}}};
}

TEST(PlotTest, TwoLabelledPanelsAndALinePerPolicyEach) {
  const std::string svg = RenderPlotSvg(TwoPolicies());
  EXPECT_THAT(svg, HasSubstr("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_THAT(svg, HasSubstr("a,b on POD4"));
  EXPECT_THAT(svg, HasSubstr(">queue length (requests)<"));
  EXPECT_THAT(svg, HasSubstr(">utilisation (% of 4 IPUs)<"));
  // Two hours of span: the axis counts minutes, on both panels.
  EXPECT_EQ(Count(svg, "time since the first submission (minutes)"), 2u);
  EXPECT_EQ(Count(svg, "<polyline"), 4u);
  EXPECT_THAT(svg, HasSubstr(">fifo</text>"));
  EXPECT_THAT(svg, HasSubstr(">backfill</text>"));
  EXPECT_THAT(svg, HasSubstr(">100</text>"));  // the utilisation axis' top tick
  EXPECT_THAT(svg, HasSubstr("</svg>"));
}

TEST(PlotTest, WriteErrors) {
  test_support::TempDir dir;
  absl::Status status = WritePlotSvg(dir.sub("plot.png"), TwoPolicies());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("must end in .svg"));
  status = WritePlotSvg(dir.sub("missing/plot.svg"), TwoPolicies());
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("cannot write plot file"));
  EXPECT_THAT(status.message(), HasSubstr("missing/plot.svg"));
  status = WritePlotSvg(dir.sub("plot.svg"), PlotInput{});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(WritePlotSvg(dir.sub("plot.svg"), TwoPolicies()).ok());
}

}  // namespace
}  // namespace ipupod::replay
