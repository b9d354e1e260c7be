// A state dir that has held a pod's state and lost it (database deleted,
// truncated, replaced, or its WAL deleted after kill -9) is refused at Open
// with DATA_LOSS naming what was found and --reinitialise; a corrupt boot
// counter is an error, not a reset; --reinitialise starts a new pod.
#include <filesystem>
#include <fstream>
#include <string>

#include <sqlite3.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/store/sqlite_state_store.h"
#include "server/store/state_marker.h"
#include "tests/support/temp_dir.h"
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ipupod::store {
namespace {

using scheduler::StoredPartition;
using test_support::TempDir;
using ::testing::HasSubstr;

StoredPartition Partition(const std::string& name, int start, int size) {
  return StoredPartition{name, start, size, "alice", 1700000000000};
}

// One run of a server: open, boot, create a partition, shut down in order.
// Returns the pod id.
std::string CleanRun(const std::string& dir, const std::string& partition, int start) {
  auto store = SqliteStateStore::Open(dir);
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return "";
  EXPECT_TRUE((*store)->NextBootId().ok());
  EXPECT_TRUE((*store)->PutPartition(Partition(partition, start, 1)).ok());
  return (*store)->pod_id();
}

void ExpectRefused(const std::string& dir, const std::string& found) {
  auto store = SqliteStateStore::Open(dir);
  ASSERT_FALSE(store.ok()) << "a lost store must not start as a new pod";
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr(found));
  EXPECT_THAT(store.status().message(), HasSubstr("--reinitialise"));
  EXPECT_THAT(store.status().message(), HasSubstr("has held pod"));
}

StoreOptions ReinitialiseOptions() {
  StoreOptions options;
  options.reinitialise = true;
  return options;
}

void Exec(const std::string& file, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_close(db);
}

TEST(LostStoreTest, FirstOpenWritesAMarkerWithThePodIdAndBoot) {
  TempDir dir;
  const std::string pod = CleanRun(dir.path(), "a", 0);
  EXPECT_EQ(pod.size(), 32u);
  auto marker = ReadStateMarker(dir.path());
  ASSERT_TRUE(marker.ok()) << marker.status();
  ASSERT_TRUE(marker->has_value());
  EXPECT_EQ((*marker)->pod_id, pod);
  EXPECT_EQ((*marker)->boot, 1);
  EXPECT_FALSE(std::filesystem::exists(dir.sub("state.db-wal"))) << "a clean stop checkpoints";
  auto again = SqliteStateStore::Open(dir.path());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->pod_id(), pod);
}

TEST(LostStoreTest, DeletedDatabaseIsRefused) {
  TempDir dir;
  CleanRun(dir.path(), "a", 0);
  std::filesystem::remove(dir.sub("state.db"));
  ExpectRefused(dir.path(), "state.db is missing");
  EXPECT_FALSE(std::filesystem::exists(dir.sub("state.db"))) << "the refusal changes nothing";
}

TEST(LostStoreTest, TruncatedDatabaseIsRefused) {
  TempDir dir;
  CleanRun(dir.path(), "a", 0);
  std::filesystem::resize_file(dir.sub("state.db"), 0);
  ExpectRefused(dir.path(), "state.db is empty (0 bytes)");
}

TEST(LostStoreTest, AnotherPodsDatabaseIsRefused) {
  TempDir dir, other;
  CleanRun(dir.path(), "a", 0);
  const std::string other_pod = CleanRun(other.path(), "b", 0);
  std::filesystem::copy_file(other.sub("state.db"), dir.sub("state.db"),
                             std::filesystem::copy_options::overwrite_existing);
  ExpectRefused(dir.path(), absl::StrCat("belongs to pod ", other_pod));
}

TEST(LostStoreTest, DatabaseWithoutAPodIsRefused) {
  TempDir dir;
  CleanRun(dir.path(), "a", 0);
  Exec(dir.sub("state.db"), "DELETE FROM meta");
  ExpectRefused(dir.path(), "holds no pod");
}

TEST(LostStoreTest, OlderCopyOfTheDatabaseIsRefused) {
  TempDir dir;
  CleanRun(dir.path(), "a", 0);
  std::filesystem::copy_file(dir.sub("state.db"), dir.sub("backup.db"));
  CleanRun(dir.path(), "b", 1);
  std::filesystem::copy_file(dir.sub("backup.db"), dir.sub("state.db"),
                             std::filesystem::copy_options::overwrite_existing);
  ExpectRefused(dir.path(), "has only reached boot 1");
}

// The child boots and writes, then dies by SIGKILL with its WAL unmerged.
void RunAndKill9(const std::string& dir) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto store = SqliteStateStore::Open(dir);
    if (!store.ok() || !(*store)->NextBootId().ok()) _exit(3);
    if (!(*store)->PutPartition(Partition("acknowledged", 2, 1)).ok()) _exit(4);
    kill(getpid(), SIGKILL);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(wstatus)) << "child exited with " << WEXITSTATUS(wstatus);
}

TEST(LostStoreTest, WalDeletedAfterKill9IsRefused) {
  TempDir dir;
  CleanRun(dir.path(), "a", 0);
  RunAndKill9(dir.path());
  ASSERT_TRUE(std::filesystem::exists(dir.sub("state.db-wal")));
  std::filesystem::remove(dir.sub("state.db-wal"));
  ExpectRefused(dir.path(), "state.db-wal");
}

TEST(LostStoreTest, EmptiedWalAfterKill9IsRefused) {
  TempDir dir;
  CleanRun(dir.path(), "a", 0);
  RunAndKill9(dir.path());
  std::filesystem::resize_file(dir.sub("state.db-wal"), 0);
  ExpectRefused(dir.path(), "state.db-wal");
}

TEST(LostStoreTest, Kill9WithTheWalInPlaceRecovers) {
  TempDir dir;
  CleanRun(dir.path(), "a", 0);
  RunAndKill9(dir.path());
  auto store = SqliteStateStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  auto state = (*store)->Load();
  ASSERT_TRUE(state.ok());
  ASSERT_EQ(state->partitions.size(), 2u);
  EXPECT_EQ(state->partitions[1].name, "acknowledged");
  EXPECT_EQ(*(*store)->NextBootId(), 3u);
}

TEST(LostStoreTest, CorruptBootCounterIsDataLossNotAReset) {
  for (const char* value : {"'abc'", "0", "-4", "2.5", "x'00'"}) {
    TempDir dir;
    CleanRun(dir.path(), "a", 0);
    Exec(dir.sub("state.db"),
         absl::StrCat("UPDATE meta SET value = ", value, " WHERE key = 'boot_count'"));
    auto store = SqliteStateStore::Open(dir.path());
    absl::Status status = store.ok() ? (*store)->NextBootId().status() : store.status();
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << value << ": " << status;
    EXPECT_THAT(status.message(), HasSubstr("boot counter")) << value;
    EXPECT_THAT(status.message(), HasSubstr("--reinitialise")) << value;
  }
}

TEST(LostStoreTest, CorruptMarkerIsDataLoss) {
  TempDir dir;
  CleanRun(dir.path(), "a", 0);
  std::ofstream(dir.sub("state.marker"), std::ios::trunc) << "ipupod-state-marker 1\nboot x\n";
  auto store = SqliteStateStore::Open(dir.path());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(store.status().message(), HasSubstr("state.marker"));
  EXPECT_THAT(store.status().message(), HasSubstr("--reinitialise"));
}

TEST(LostStoreTest, MissingMarkerIsWrittenAgainFromTheDatabase) {
  TempDir dir;
  const std::string pod = CleanRun(dir.path(), "a", 0);
  std::filesystem::remove(dir.sub("state.marker"));
  auto store = SqliteStateStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->pod_id(), pod);
  EXPECT_EQ((*store)->Load()->partitions.size(), 1u);
  auto marker = ReadStateMarker(dir.path());
  ASSERT_TRUE(marker.ok() && marker->has_value());
  EXPECT_EQ((*marker)->pod_id, pod);
}

TEST(LostStoreTest, ReinitialiseStartsANewEmptyPod) {
  TempDir dir;
  const std::string old_pod = CleanRun(dir.path(), "a", 0);
  std::filesystem::remove(dir.sub("state.db"));
  auto store = SqliteStateStore::Open(dir.path(), ReinitialiseOptions());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_NE((*store)->pod_id(), old_pod);
  EXPECT_TRUE((*store)->Load()->partitions.empty());
  EXPECT_EQ(*(*store)->NextBootId(), 1u);
  store->reset();
  EXPECT_TRUE(SqliteStateStore::Open(dir.path()).ok()) << "the new pod starts normally after";
}

}  // namespace
}  // namespace ipupod::store
