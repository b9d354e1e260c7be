// End to end: ipupodd refuses to start (exit 2, one line saying what it
// found and that --reinitialise starts a new pod) on a state dir that has
// held a pod's state and lost it; --reinitialise starts a new pod loudly.
#include <filesystem>

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "tests/integration/harness.h"
#include <signal.h>

namespace ipupod::testing {
namespace {

using std::chrono::seconds;

class LostStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(Cli({"partition", "create", "acknowledged", "--size", "4"}).exit_code, 0);
  }
  CliResult Cli(const std::vector<std::string>& args) {
    return RunCli(server_.address(), "alice", args);
  }
  std::string File(const std::string& name) const { return server_.state_dir() + "/state/" + name; }
  // The restart fails with exit code 2 and a message naming `found`.
  void ExpectRefused(const std::string& found) {
    ASSERT_FALSE(server_.Restart()) << "a lost store must not start as a new pod";
    EXPECT_EQ(server_.process().Wait(seconds(10)), 2);
    const std::string& err = server_.process().stderr_text();
    EXPECT_NE(err.find(found), std::string::npos) << err;
    EXPECT_NE(err.find("ipupodd --reinitialise"), std::string::npos) << err;
  }
  std::vector<std::string> PartitionNames() {
    nlohmann::json doc = Cli({"--json", "partition", "list"}).json();
    if (doc.is_object()) doc = doc["partitions"];
    std::vector<std::string> names;
    for (const auto& p : doc) names.push_back(p["name"]);
    return names;
  }

  ServerUnderTest server_;
};

TEST_F(LostStoreTest, DeletedDatabaseIsRefusedUntilReinitialise) {
  server_.Kill(SIGTERM);
  std::filesystem::remove(File("state.db"));
  ExpectRefused("state.db is missing");
  EXPECT_FALSE(std::filesystem::exists(File("state.db"))) << "the refusal changes nothing";

  server_.set_extra_args({"--reinitialise"});
  ASSERT_TRUE(server_.Restart()) << server_.process().stderr_text();
  EXPECT_TRUE(server_.process().WaitForStderr("NEW, EMPTY pod", seconds(10)));
  EXPECT_TRUE(PartitionNames().empty());
  ASSERT_EQ(Cli({"partition", "create", "fresh", "--size", "2"}).exit_code, 0);

  server_.set_extra_args({});
  server_.Kill(SIGTERM);
  ASSERT_TRUE(server_.Restart()) << "the new pod starts normally: "
                                 << server_.process().stderr_text();
  EXPECT_EQ(PartitionNames(), std::vector<std::string>{"fresh"});
}

TEST_F(LostStoreTest, TruncatedDatabaseIsRefused) {
  server_.Kill(SIGTERM);
  std::filesystem::resize_file(File("state.db"), 0);
  ExpectRefused("state.db is empty (0 bytes)");
}

TEST_F(LostStoreTest, WalDeletedAfterKill9IsRefused) {
  server_.Kill(SIGKILL);
  ASSERT_TRUE(std::filesystem::exists(File("state.db-wal")));
  std::filesystem::remove(File("state.db-wal"));
  ExpectRefused("state.db-wal");
}

TEST_F(LostStoreTest, CorruptBootCounterIsRefused) {
  server_.Kill(SIGTERM);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(File("state.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE meta SET value = 'many' WHERE key = 'boot_count'", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  ExpectRefused("boot counter is 'many'");
}

}  // namespace
}  // namespace ipupod::testing
