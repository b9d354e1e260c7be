// ipupod-replay's command line in-process: help, usage errors (exit 2),
// failures (exit 1), and a small replay's table and JSON.
#include "tools/replay/cli.h"

#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/temp_dir.h"

namespace ipupod::replay {
namespace {

using ::testing::HasSubstr;

struct Result {
  int code = -1;
  std::string out;
  std::string err;
};

Result Replay(std::vector<std::string> args) {
  args.insert(args.begin(), "ipupod-replay");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  Result r;
  r.code = RunReplayCli(static_cast<int>(argv.size()), argv.data(), out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

class ReplayCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(trace_) << "timestamp,duration,num_gpus,gpu_time,cluster\n"
                             "2017-10-01 00:00:00,100,2,200,a\n"
                             "2017-10-01 00:00:10,50,4,200,b\n"
                             "2017-10-01 00:00:20,10,1,10,a\n"
                             "2017-10-01 00:00:30,20,3,60,b\n"
                             "2017-10-01 00:00:40,10,8,80,a\n";
  }
  test_support::TempDir dir_;
  std::string trace_ = dir_.sub("t.csv");
};

TEST_F(ReplayCliTest, HelpTeachesWithExamples) {
  Result r = Replay({"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--trace"));
  EXPECT_THAT(r.out, HasSubstr("--estimate-factor"));
  EXPECT_THAT(r.out, HasSubstr("--priority-interval"));
  EXPECT_THAT(r.out, HasSubstr("Examples ("));
  EXPECT_THAT(r.out, HasSubstr("ipupod-replay --trace philly.csv --clusters 103959,ed69ec,e13805 "
                               "--shares 103959=2"));
}

TEST_F(ReplayCliTest, UsageErrorsNameTheFlag) {
  const struct {
    std::vector<std::string> args;
    const char* message;
  } cases[] = {
      {{}, "--trace is required"},
      {{"--trace", trace_, "--pod", "48"}, "48"},
      {{"--trace", trace_, "--policy", "lottery"}, "--policy \"lottery\" is not a policy"},
      {{"--trace", trace_, "--shares", "a"}, "--shares \"a\" is not VC=N"},
      {{"--trace", trace_, "--shares", "a=1,a=2"}, "--shares names a twice"},
      {{"--trace", trace_, "--from", "2017-13-01"}, "--from \"2017-13-01\" is not a date"},
      {{"--trace", trace_, "--plot", "p.png"}, "name a .svg file"},
      {{"--trace", trace_, "--clusters", "c"}, "the trace has no cluster \"c\""},
      {{"--trace", trace_, "--shares", "c=2"}, "shares name c, which has no job"},
      {{"--trace", trace_, "--estimate-factor", "-2"}, "estimate factor -2"},
      {{"--trace", trace_, "--priority-interval", "-1"}, "--priority-interval -1 must be >= 0"},
  };
  for (const auto& c : cases) {
    Result r = Replay(c.args);
    EXPECT_EQ(r.code, 2) << c.message << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message));
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

TEST_F(ReplayCliTest, TheWalksBoundIsAFlag) {
  EXPECT_THAT(Replay({"--help"}).out, HasSubstr("--max-backfill-waiters"));
  Result negative = Replay({"--trace", trace_, "--max-backfill-waiters", "-1"});
  EXPECT_EQ(negative.code, 2);
  EXPECT_THAT(negative.err, HasSubstr("--max-backfill-waiters -1 must be >= 0"));
  for (const char* bound : {"0", "1"}) {
    Result r = Replay({"--trace", trace_, "--pod", "4", "--max-backfill-waiters", bound, "--json"});
    EXPECT_EQ(r.code, 0) << r.err;
  }
}

TEST_F(ReplayCliTest, FailuresExitOne) {
  Result missing = Replay({"--trace", dir_.sub("none.csv")});
  EXPECT_EQ(missing.code, 1);
  EXPECT_THAT(missing.err, HasSubstr("ipupod-replay: error: cannot open trace"));
  Result plot = Replay({"--trace", trace_, "--pod", "4", "--plot", dir_.sub("no/dir.svg")});
  EXPECT_EQ(plot.code, 1);
  EXPECT_THAT(plot.err, HasSubstr("cannot write plot file"));
}

TEST_F(ReplayCliTest, TableNamesTheSelectionAndEveryPolicy) {
  Result r = Replay({"--trace", trace_, "--pod", "POD4"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("3 jobs of a,b submitted 2017-10-01 00:00:00 to 2017-10-01 "
                               "00:00:20, on POD4; 2 dropped (1 over 4 IPUs, 1 not a power of "
                               "two)"));
  for (const char* policy : {"\nfifo ", "\nbackfill ", "\nmultifactor "}) {
    EXPECT_THAT(r.out, HasSubstr(policy));
  }
  EXPECT_THAT(r.err, HasSubstr("fifo: 3 jobs replayed in"));
}

TEST_F(ReplayCliTest, JsonHasTheIssueKeysInOrder) {
  Result r = Replay({"--trace", trace_, "--pod", "4", "--policy", "fifo", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::ordered_json doc = nlohmann::ordered_json::parse(r.out);
  ASSERT_TRUE(doc.is_array());
  ASSERT_EQ(doc.size(), 1u);
  std::vector<std::string> keys;
  for (auto it = doc[0].begin(); it != doc[0].end(); ++it) keys.push_back(it.key());
  const std::vector<std::string> issue = {"policy",
                                          "jobs",
                                          "dropped",
                                          "avg_jct_s",
                                          "avg_queue_s",
                                          "p50_queue_s",
                                          "p95_queue_s",
                                          "p99_queue_s",
                                          "makespan_s",
                                          "utilisation",
                                          "fragmentation_delay_s",
                                          "jain"};
  ASSERT_GE(keys.size(), issue.size());
  EXPECT_EQ(std::vector<std::string>(keys.begin(), keys.begin() + issue.size()), issue);
  EXPECT_EQ(doc[0]["policy"], "fifo");
  EXPECT_EQ(doc[0]["jobs"], 3);
  EXPECT_EQ(doc[0]["dropped"], 2);
  // Starts 0, 100, 150 (behind the 4-IPU job): waits 0, 90, 130; ends at 160.
  EXPECT_DOUBLE_EQ(doc[0]["avg_queue_s"].get<double>(), (0 + 90 + 130) / 3.0);
  EXPECT_DOUBLE_EQ(doc[0]["makespan_s"].get<double>(), 160);
  ASSERT_EQ(doc[0]["accounts"].size(), 2u);
  EXPECT_EQ(doc[0]["accounts"][0]["account"], "a");
}

}  // namespace
}  // namespace ipupod::replay
