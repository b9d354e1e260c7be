// Reading a trace: good rows, column order, line ends, bad rows named by
// line, file errors, and the --from/--to dates.
#include "tools/replay/trace.h"

#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/temp_dir.h"

namespace ipupod::replay {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kHeader = "timestamp,duration,num_gpus,gpu_time,cluster\n";

absl::Time At(const char* text) {
  absl::Time t;
  std::string error;
  EXPECT_TRUE(absl::ParseTime("%Y-%m-%d %H:%M:%S", text, absl::UTCTimeZone(), &t, &error));
  return t;
}

TEST(TraceTest, ParsesPhillyRows) {
  absl::StatusOr<std::vector<TraceJob>> jobs =
      ParseTrace(absl::StrCat(kHeader,
                              "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
                              "2017-10-09 06:13:03,2951.5,8,23612.0,6214e9\n"),
                 "t.csv");
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].line, 2);
  EXPECT_EQ((*jobs)[0].submit, At("2017-10-09 07:01:55"));
  EXPECT_EQ((*jobs)[0].duration_seconds, 66.0);
  EXPECT_EQ((*jobs)[0].gpus, 1);
  EXPECT_EQ((*jobs)[0].cluster, "11cb48");
  EXPECT_EQ((*jobs)[1].line, 3);
  EXPECT_EQ((*jobs)[1].duration_seconds, 2951.5);
  EXPECT_EQ((*jobs)[1].gpus, 8);
  EXPECT_EQ((*jobs)[1].cluster, "6214e9");
}

TEST(TraceTest, FindsColumnsByNameAndAcceptsCrlfAndBlankLines) {
  absl::StatusOr<std::vector<TraceJob>> jobs = ParseTrace(
      "cluster,num_gpus,timestamp,duration\r\n\r\nvc-a,4,2017-01-02 03:04:05,10\r\n\n", "t.csv");
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].line, 3);
  EXPECT_EQ((*jobs)[0].cluster, "vc-a");
  EXPECT_EQ((*jobs)[0].gpus, 4);
  EXPECT_EQ((*jobs)[0].submit, At("2017-01-02 03:04:05"));
}

TEST(TraceTest, EachKindOfBadRowIsNamedByLineAndField) {
  const struct {
    const char* row;
    const char* message;
  } cases[] = {
      {"2017-13-01 00:00:00,1,1,1,a", "line 2: timestamp \"2017-13-01 00:00:00\""},
      {"2017-02-30 00:00:00,1,1,1,a", "line 2: timestamp \"2017-02-30 00:00:00\""},
      {"yesterday,1,1,1,a", "timestamp \"yesterday\" is not YYYY-MM-DD HH:MM:SS"},
      {"2017-01-01 00:00:00,-5,1,1,a", "duration \"-5\" is not a number of seconds >= 0"},
      {"2017-01-01 00:00:00,nan,1,1,a", "duration \"nan\""},
      {"2017-01-01 00:00:00,abc,1,1,a", "duration \"abc\""},
      {"2017-01-01 00:00:00,1,1.5,1,a", "num_gpus \"1.5\" is not a whole number >= 0"},
      {"2017-01-01 00:00:00,1,-2,1,a", "num_gpus \"-2\""},
      {"2017-01-01 00:00:00,1,1,1,a b", "cluster \"a b\" is not 1-64 characters"},
      {"2017-01-01 00:00:00,1,1,1,", "cluster \"\""},
      {"2017-01-01 00:00:00,1,1,a", "4 fields where the header has 5"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<std::vector<TraceJob>> jobs =
        ParseTrace(absl::StrCat(kHeader, c.row, "\n"), "bad.csv");
    ASSERT_FALSE(jobs.ok()) << c.row;
    EXPECT_EQ(jobs.status().code(), absl::StatusCode::kInvalidArgument) << c.row;
    EXPECT_THAT(jobs.status().message(), HasSubstr("bad.csv: 1 bad rows")) << c.row;
    EXPECT_THAT(jobs.status().message(), HasSubstr(c.message)) << c.row;
  }
}

TEST(TraceTest, ReportsTheFirstBadRowsAndCountsTheRest) {
  std::string text = kHeader;
  for (int i = 0; i < 8; ++i) absl::StrAppend(&text, "2017-01-01 00:00:00,1,x", i, ",1,a\n");
  absl::StatusOr<std::vector<TraceJob>> jobs = ParseTrace(text, "bad.csv");
  ASSERT_FALSE(jobs.ok());
  EXPECT_THAT(jobs.status().message(), HasSubstr("8 bad rows"));
  EXPECT_THAT(jobs.status().message(), HasSubstr("line 6: num_gpus \"x4\""));
  EXPECT_THAT(jobs.status().message(), Not(HasSubstr("line 7:")));
  EXPECT_THAT(jobs.status().message(), HasSubstr("and 3 more bad rows"));
}

TEST(TraceTest, HeaderProblems) {
  absl::StatusOr<std::vector<TraceJob>> missing =
      ParseTrace("timestamp,duration,gpus,cluster\n", "h.csv");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr("h.csv line 1: the header has no column "
                                                    "num_gpus"));
  absl::StatusOr<std::vector<TraceJob>> empty = ParseTrace("\n\n", "e.csv");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.status().message(), HasSubstr("e.csv is empty"));
  absl::StatusOr<std::vector<TraceJob>> header_only = ParseTrace(kHeader, "o.csv");
  ASSERT_TRUE(header_only.ok()) << header_only.status();
  EXPECT_TRUE(header_only->empty());
}

TEST(TraceTest, ReadTraceFileErrors) {
  test_support::TempDir dir;
  absl::StatusOr<std::vector<TraceJob>> missing = ReadTrace(dir.sub("nope.csv"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("nope.csv': no such file"));
  absl::StatusOr<std::vector<TraceJob>> directory = ReadTrace(dir.path());
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(directory.status().message(), HasSubstr("is not a regular file"));

  std::ofstream(dir.sub("t.csv")) << kHeader << "2017-10-09 07:01:55,66.0,2,132.0,abc\n";
  absl::StatusOr<std::vector<TraceJob>> good = ReadTrace(dir.sub("t.csv"));
  ASSERT_TRUE(good.ok()) << good.status();
  ASSERT_EQ(good->size(), 1u);
  EXPECT_EQ((*good)[0].gpus, 2);
}

TEST(TraceTest, DatesForTheWindow) {
  absl::StatusOr<absl::Time> day = ParseTraceDate("2017-10-01", "--from");
  ASSERT_TRUE(day.ok()) << day.status();
  EXPECT_EQ(*day, At("2017-10-01 00:00:00"));
  absl::StatusOr<absl::Time> second = ParseTraceDate("2017-10-01 12:30:05", "--to");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*second, At("2017-10-01 12:30:05"));
  absl::StatusOr<absl::Time> iso = ParseTraceDate("2017-10-01T12:30:05", "--to");
  ASSERT_TRUE(iso.ok()) << iso.status();
  EXPECT_EQ(*iso, *second);
  EXPECT_EQ(FormatTraceTime(*second), "2017-10-01 12:30:05");

  for (const char* bad : {"2017-10-32", "10/01/2017", "", "2017-10-01 25:00:00"}) {
    absl::StatusOr<absl::Time> t = ParseTraceDate(bad, "--from");
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(t.status().message(), HasSubstr("--from \""));
    EXPECT_THAT(t.status().message(), HasSubstr("use YYYY-MM-DD"));
  }
}

}  // namespace
}  // namespace ipupod::replay
