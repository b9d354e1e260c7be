// The `ipupod-replay` binary on a checked-in slice of the Philly trace
// (tests/tools/replay/data/philly_slice.csv, see NOTICE.md beside it): --json with
// the keys, --plot, and two runs (two processes) printing identical
// JSON.
#include <cstdlib>
#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/integration/harness.h"

namespace ipupod::testing {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;

std::string Fixture() {
  const char* src = std::getenv("IPUPOD_SOURCE_DIR");
  if (src == nullptr) throw std::runtime_error("IPUPOD_SOURCE_DIR is not set (run through ctest)");
  return std::string(src) + "/tests/tools/replay/data/philly_slice.csv";
}

struct Ran {
  int code = -1;
  std::string out;
  std::string err;
};

Ran RunReplay(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {BuildDir() + "/tools/replay/ipupod-replay"};
  argv.insert(argv.end(), args.begin(), args.end());
  Process p = Process::Start(argv);
  std::optional<int> code = p.Wait(std::chrono::milliseconds(seconds(120)));
  EXPECT_TRUE(code.has_value()) << "ipupod-replay did not finish within 120 s";
  return Ran{code.value_or(-1), p.stdout_text(), p.stderr_text()};
}

TEST(ReplayBinaryTest, JsonAndPlotOfAPhillySliceAndTwoRunsAgree) {
  TempDir dir;
  const std::vector<std::string> args = {"--trace", Fixture(), "--pod",         "16",
                                         "--json",  "--plot",  dir.sub("q.svg")};
  Ran first = RunReplay(args);
  ASSERT_EQ(first.code, 0) << first.err;
  nlohmann::json doc = nlohmann::json::parse(first.out);
  ASSERT_TRUE(doc.is_array());
  ASSERT_EQ(doc.size(), 3u);
  const std::vector<std::string> policies = {"fifo", "backfill", "multifactor"};
  for (size_t i = 0; i < doc.size(); ++i) {
    const nlohmann::json& p = doc[i];
    EXPECT_EQ(p["policy"], policies[i]);
    // 59 rows: 3 ask for 12 GPUs and 2 for 24 (not powers of two), 1 for 32 (over POD16).
    EXPECT_EQ(p["jobs"], 53);
    EXPECT_EQ(p["dropped"], 6);
    for (const char* key : {"avg_jct_s", "avg_queue_s", "p50_queue_s", "p95_queue_s", "p99_queue_s",
                            "makespan_s", "utilisation", "fragmentation_delay_s", "jain"}) {
      ASSERT_TRUE(p.contains(key)) << key;
      EXPECT_GE(p[key].get<double>(), 0) << key;
    }
    EXPECT_LE(p["p50_queue_s"].get<double>(), p["p95_queue_s"].get<double>());
    EXPECT_LE(p["p95_queue_s"].get<double>(), p["p99_queue_s"].get<double>());
    EXPECT_GT(p["utilisation"].get<double>(), 0);
    EXPECT_LE(p["utilisation"].get<double>(), 1);
    EXPECT_EQ(p["accounts"].size(), 4u);
  }
  const std::string svg = ReadTextFile(dir.sub("q.svg"));
  EXPECT_THAT(svg, HasSubstr("<svg"));
  EXPECT_THAT(svg, HasSubstr("queue length (requests)"));
  EXPECT_THAT(svg, HasSubstr("utilisation (% of 16 IPUs)"));
  EXPECT_THAT(svg, HasSubstr(">multifactor</text>"));

  Ran second = RunReplay(args);
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_EQ(first.out, second.out) << "two runs of one replay decided differently";
}

TEST(ReplayBinaryTest, TableAndUsageErrors) {
  Ran table = RunReplay({"--trace", Fixture(), "--pod", "16", "--clusters", "0e4a51,ed69ec",
                         "--shares", "ed69ec=3", "--policy", "multifactor"});
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("35 jobs of 0e4a51,ed69ec"));
  EXPECT_THAT(table.out, HasSubstr("\nmultifactor "));
  EXPECT_THAT(table.err, HasSubstr("multifactor: 35 jobs replayed in"));

  Ran usage = RunReplay({"--trace", Fixture(), "--clusters", "0e4a52"});
  EXPECT_EQ(usage.code, 2);
  EXPECT_THAT(usage.err, HasSubstr("did you mean '0e4a51'"));
  EXPECT_TRUE(usage.out.empty());
}

}  // namespace
}  // namespace ipupod::testing
