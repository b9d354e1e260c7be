// Selecting from a trace: clusters, the [from, to) window, dropped jobs
// counted by reason, submission order, and the errors.
#include "tools/replay/selection.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ipupod::replay {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::Time Day(int day, int hour = 0) {
  return absl::FromCivil(absl::CivilHour(2017, 10, day, hour), absl::UTCTimeZone());
}

TraceJob Job(int64_t line, absl::Time submit, int64_t gpus, const char* cluster) {
  return TraceJob{line, submit, 60, gpus, cluster};
}

std::vector<int64_t> Lines(const Selection& s) {
  std::vector<int64_t> lines;
  for (const TraceJob& j : s.jobs) lines.push_back(j.line);
  return lines;
}

std::vector<TraceJob> Trace() {
  return {Job(2, Day(3), 1, "a"),  Job(3, Day(1), 2, "b"),   Job(4, Day(2), 128, "a"),
          Job(5, Day(2), 12, "b"), Job(6, Day(1), 4, "a"),   Job(7, Day(5), 0, "c"),
          Job(8, Day(1), 64, "c"), Job(9, Day(4, 6), 1, "a")};
}

TEST(SelectionTest, EverythingSortedBySubmissionWithTiesInFileOrder) {
  absl::StatusOr<Selection> s = Select(Trace(), SelectionOptions{});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(Lines(*s), ElementsAre(3, 6, 8, 2, 9));
  EXPECT_EQ(s->in_window, 8);
  EXPECT_EQ(s->dropped.too_large, 1);         // 128 > 64
  EXPECT_EQ(s->dropped.not_power_of_two, 2);  // 12 and 0
  EXPECT_EQ(s->dropped.total(), 3);
  EXPECT_THAT(s->clusters, ElementsAre("a", "b", "c"));
}

TEST(SelectionTest, ClustersAndWindow) {
  SelectionOptions options;
  options.clusters = {"a"};
  options.from = Day(2);
  options.to = Day(4, 6);  // exclusive: line 9 (submitted then) is out
  absl::StatusOr<Selection> s = Select(Trace(), options);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(Lines(*s), ElementsAre(2));
  EXPECT_EQ(s->in_window, 2);  // lines 2 and 4
  EXPECT_EQ(s->dropped.too_large, 1);
  EXPECT_THAT(s->clusters, ElementsAre("a"));
}

TEST(SelectionTest, ThePodSizeDecidesWhatIsTooLarge) {
  SelectionOptions options;
  options.pod_ipus = 4;
  absl::StatusOr<Selection> s = Select(Trace(), options);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(Lines(*s), ElementsAre(3, 6, 2, 9));
  EXPECT_EQ(s->dropped.too_large, 2);  // 128 and 64
  EXPECT_EQ(s->dropped.not_power_of_two, 2);
}

TEST(SelectionTest, UnknownClusterNamesCloseMatchesAndAllClusters) {
  std::vector<TraceJob> trace = Trace();
  trace.push_back(Job(10, Day(1), 1, "6214e9"));
  SelectionOptions options;
  options.clusters = {"a", "6214e8"};
  absl::StatusOr<Selection> s = Select(trace, options);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("no cluster \"6214e8\""));
  EXPECT_THAT(s.status().message(), HasSubstr("did you mean '6214e9'"));
  EXPECT_THAT(s.status().message(), HasSubstr("its clusters are: 6214e9, a, b, c"));
}

TEST(SelectionTest, WindowMustBeOrdered) {
  SelectionOptions options;
  options.from = Day(3);
  options.to = Day(3);
  absl::StatusOr<Selection> s = Select(Trace(), options);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("is not before --to"));
}

TEST(SelectionTest, EmptySelectionsSayWhy) {
  SelectionOptions window;
  window.from = Day(20);
  absl::StatusOr<Selection> none = Select(Trace(), window);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(none.status().message(), HasSubstr("no job of the trace is in the selection"));
  EXPECT_THAT(none.status().message(), HasSubstr("from 2017-10-20 00:00:00 to the end"));

  SelectionOptions dropped;
  dropped.clusters = {"c"};
  dropped.pod_ipus = 32;
  absl::StatusOr<Selection> all_dropped = Select(Trace(), dropped);
  ASSERT_FALSE(all_dropped.ok());
  EXPECT_EQ(all_dropped.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(all_dropped.status().message(),
              HasSubstr("all 2 jobs of the selection (clusters c, from the start to the end) "
                        "were dropped: 1 need more than the pod's 32 IPUs, 1 ask for"));
}

}  // namespace
}  // namespace ipupod::replay
