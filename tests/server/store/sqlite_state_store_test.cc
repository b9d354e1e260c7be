#include "server/store/sqlite_state_store.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <sqlite3.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/temp_dir.h"
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ipupod::store {
namespace {

using scheduler::StoredFailure;
using scheduler::StoredPartition;
using ::testing::HasSubstr;

using test_support::TempDir;

StoredPartition Partition(const std::string& name, int start, int size) {
  return StoredPartition{name, start, size, "alice", 1700000000000 + start};
}

TEST(SqliteStateStoreTest, FreshStoreIsEmptyAndRoundTrips) {
  TempDir dir;
  auto store = SqliteStateStore::Open(dir.sub("state"));
  ASSERT_TRUE(store.ok()) << store.status();
  auto empty = (*store)->Load();
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->partitions.empty());
  EXPECT_TRUE(empty->failures.empty());

  ASSERT_TRUE((*store)->PutPartition(Partition("b", 8, 8)).ok());
  ASSERT_TRUE((*store)->PutPartition(Partition("a", 0, 4)).ok());
  ASSERT_TRUE((*store)->PutFailure({5, "link training failed"}).ok());
  ASSERT_TRUE((*store)->PutFailure({2, "ecc"}).ok());
  auto state = (*store)->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(state->partitions.size(), 2u);
  EXPECT_EQ(state->partitions[0].name, "a");  // start order
  EXPECT_EQ(state->partitions[0].start, 0);
  EXPECT_EQ(state->partitions[0].size, 4);
  EXPECT_EQ(state->partitions[0].owner, "alice");
  EXPECT_EQ(state->partitions[0].created_unix_ms, 1700000000000);
  EXPECT_EQ(state->partitions[1].name, "b");
  ASSERT_EQ(state->failures.size(), 2u);
  EXPECT_EQ(state->failures[0].ipu, 2);  // IPU order
  EXPECT_EQ(state->failures[1].ipu, 5);
  EXPECT_EQ(state->failures[1].reason, "link training failed");
}

TEST(SqliteStateStoreTest, PutReplacesAndDeleteIsIdempotent) {
  TempDir dir;
  auto store = SqliteStateStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->PutPartition(Partition("a", 0, 4)).ok());
  ASSERT_TRUE((*store)->PutPartition(Partition("a", 4, 4)).ok());
  ASSERT_TRUE((*store)->PutFailure({1, "first"}).ok());
  ASSERT_TRUE((*store)->PutFailure({1, "second"}).ok());
  auto state = (*store)->Load();
  ASSERT_TRUE(state.ok());
  ASSERT_EQ(state->partitions.size(), 1u);
  EXPECT_EQ(state->partitions[0].start, 4);
  ASSERT_EQ(state->failures.size(), 1u);
  EXPECT_EQ(state->failures[0].reason, "second");

  EXPECT_TRUE((*store)->DeletePartition("a").ok());
  EXPECT_TRUE((*store)->DeletePartition("a").ok());
  EXPECT_TRUE((*store)->DeleteFailure(1).ok());
  EXPECT_TRUE((*store)->DeleteFailure(1).ok());
  state = (*store)->Load();
  ASSERT_TRUE(state.ok());
  EXPECT_TRUE(state->partitions.empty());
  EXPECT_TRUE(state->failures.empty());
}

TEST(SqliteStateStoreTest, ReopenKeepsState) {
  TempDir dir;
  {
    auto store = SqliteStateStore::Open(dir.path());
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->PutPartition(Partition("keep", 0, 2)).ok());
    ASSERT_TRUE((*store)->PutPartition(Partition("gone", 2, 2)).ok());
    ASSERT_TRUE((*store)->DeletePartition("gone").ok());
    ASSERT_TRUE((*store)->PutFailure({7, "dead"}).ok());
  }
  auto store = SqliteStateStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  auto state = (*store)->Load();
  ASSERT_TRUE(state.ok());
  ASSERT_EQ(state->partitions.size(), 1u);
  EXPECT_EQ(state->partitions[0].name, "keep");
  ASSERT_EQ(state->failures.size(), 1u);
  EXPECT_EQ(state->failures[0].ipu, 7);
}

TEST(SqliteStateStoreTest, BootCounterIncrementsAcrossReopen) {
  TempDir dir;
  {
    auto store = SqliteStateStore::Open(dir.path());
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ(*(*store)->NextBootId(), 1u);
    EXPECT_EQ(*(*store)->NextBootId(), 2u);
  }
  auto store = SqliteStateStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(*(*store)->NextBootId(), 3u);
}

TEST(SqliteStateStoreTest, UsesWalAndFullSync) {
  TempDir dir;
  auto store = SqliteStateStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->PutPartition(Partition("a", 0, 1)).ok());
  EXPECT_TRUE(std::filesystem::exists(dir.sub("state.db-wal")));
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(dir.sub("state.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr),
            SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &stmt, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)), "wal");
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

void SetUserVersion(const std::string& file, int version) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
  std::string sql = absl::StrCat("PRAGMA user_version = ", version);
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
}

TEST(SqliteStateStoreTest, RefusesNewerSchema) {
  TempDir dir;
  ASSERT_TRUE(SqliteStateStore::Open(dir.path()).ok());
  SetUserVersion(dir.sub("state.db"), SqliteStateStore::kSchemaVersion + 1);
  auto store = SqliteStateStore::Open(dir.path());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(),
              HasSubstr(absl::StrCat("schema version ", SqliteStateStore::kSchemaVersion + 1)));
  EXPECT_THAT(store.status().message(), HasSubstr("newer"));
}

jobs::JobRecord Job(const std::string& id, jobs::JobState state) {
  jobs::JobRecord job;
  job.id = id;
  job.user = "alice";
  job.state = state;
  job.spec.executable_sha256 = std::string(64, 'a');
  job.spec.optimizer = {{"lr", 0.01}};
  job.runs_total = 8;
  return job;
}

TEST(SqliteStateStoreTest, JobsRoundTripInSubmissionOrderAcrossReopen) {
  TempDir dir;
  {
    auto store = SqliteStateStore::Open(dir.path());
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ(*(*store)->NextJobNumber(), 1);
    EXPECT_EQ(*(*store)->NextJobNumber(), 2);
    const jobs::JobRecord sweep[] = {Job("9.0", jobs::JobState::kPending),
                                     Job("9.1", jobs::JobState::kPending)};
    ASSERT_TRUE((*store)->PutJobs({Job("10", jobs::JobState::kPending)}).ok());
    ASSERT_TRUE((*store)->PutJobs(sweep).ok());
    jobs::JobRecord done = Job("10", jobs::JobState::kCompleted);
    done.runs_done = 8;
    ASSERT_TRUE((*store)->PutJobs({done}).ok());  // replaces, keeps its place
    ASSERT_TRUE((*store)->DeleteJob("9.0").ok());
    ASSERT_TRUE((*store)->DeleteJob("404").ok());
  }
  auto store = SqliteStateStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(*(*store)->NextJobNumber(), 3);
  auto jobs = (*store)->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].id, "10");
  EXPECT_EQ((*jobs)[0].state, jobs::JobState::kCompleted);
  EXPECT_EQ((*jobs)[0].runs_done, 8);
  EXPECT_EQ((*jobs)[0].spec.optimizer.at("lr"), 0.01);
  EXPECT_EQ((*jobs)[1].id, "9.1");
}

TEST(SqliteStateStoreTest, AVersionOneDatabaseGainsTheJobsAndUsageTablesAndKeepsItsState) {
  TempDir dir;
  {
    auto store = SqliteStateStore::Open(dir.path());
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->PutPartition(Partition("p", 0, 4)).ok());
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir.sub("state.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(
      sqlite3_exec(db,
                   "DROP TABLE jobs; DROP TABLE usage; DROP TABLE audit; DROP TABLE audit_purge; "
                   "PRAGMA user_version = 1;",
                   nullptr, nullptr, nullptr),
      SQLITE_OK);
  sqlite3_close(db);
  auto store = SqliteStateStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->Load()->partitions.size(), 1u);
  ASSERT_TRUE((*store)->PutJobs({Job("1", jobs::JobState::kPending)}).ok());
  EXPECT_EQ((*store)->LoadJobs()->size(), 1u);
  EXPECT_TRUE((*store)->Query(accounting::LedgerQuery())->empty());
}

TEST(SqliteStateStoreTest, ACorruptJobRecordIsDataLossNamingTheJob) {
  TempDir dir;
  {
    auto store = SqliteStateStore::Open(dir.path());
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->PutJobs({Job("7", jobs::JobState::kPending)}).ok());
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir.sub("state.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE jobs SET record = '{\"id\": 7}'", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto store = SqliteStateStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  auto jobs = (*store)->LoadJobs();
  EXPECT_EQ(jobs.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(jobs.status().message(), HasSubstr("job 7"));
}

TEST(SqliteStateStoreTest, AFailedJobWriteChangesNothing) {
  TempDir dir;
  StoreOptions options;
  options.fault = WriteFault{WritePoint::kPutJobs, 2, FaultAction::kFail};
  auto store = SqliteStateStore::Open(dir.path(), options);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->PutJobs({Job("1", jobs::JobState::kPending)}).ok());
  const jobs::JobRecord two[] = {Job("1", jobs::JobState::kRunning),
                                 Job("2", jobs::JobState::kPending)};
  EXPECT_EQ((*store)->PutJobs(two).code(), absl::StatusCode::kUnavailable);
  auto jobs = (*store)->LoadJobs();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].state, jobs::JobState::kPending);
}

TEST(SqliteStateStoreTest, UncreatableDirIsFailedPrecondition) {
  TempDir dir;
  std::ofstream(dir.sub("file")) << "x";
  auto store = SqliteStateStore::Open(dir.sub("file/state"));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr("cannot create state dir"));

  auto on_file = SqliteStateStore::Open(dir.sub("file"));
  ASSERT_FALSE(on_file.ok());
  EXPECT_EQ(on_file.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(on_file.status().message(), HasSubstr("not a directory"));
}

TEST(SqliteStateStoreTest, ReadOnlyDirIsFailedPrecondition) {
  if (geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  TempDir dir;
  std::string ro = dir.sub("ro");
  ASSERT_EQ(mkdir(ro.c_str(), 0555), 0);
  auto store = SqliteStateStore::Open(ro);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  chmod(ro.c_str(), 0755);
}

TEST(SqliteStateStoreTest, DatabaseFileThatIsADirectoryIsFailedPrecondition) {
  TempDir dir;
  std::filesystem::create_directory(dir.sub("state.db"));
  auto store = SqliteStateStore::Open(dir.path());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr("state.db"));
}

TEST(SqliteStateStoreTest, GarbageFileIsDataLoss) {
  TempDir dir;
  std::ofstream(dir.sub("state.db")) << std::string(8192, 'z');
  auto store = SqliteStateStore::Open(dir.path());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(store.status().message(), HasSubstr("not a database"));
}

TEST(SqliteStateStoreTest, SecondOpenOfSameDirIsRefused) {
  TempDir dir;
  auto first = SqliteStateStore::Open(dir.path());
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = SqliteStateStore::Open(dir.path());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("in use"));
  first->reset();
  EXPECT_TRUE(SqliteStateStore::Open(dir.path()).ok());
}

TEST(SqliteStateStoreTest, ConstraintViolationChangesNothing) {
  TempDir dir;
  auto store = SqliteStateStore::Open(dir.path());
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->PutPartition(Partition("a", 0, 4)).ok());
  absl::Status bad = (*store)->PutPartition(Partition("a", -1, 0));
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
  EXPECT_THAT(bad.message(), HasSubstr("CHECK constraint"));
  EXPECT_EQ((*store)->PutPartition(Partition("", 0, 1)).code(), absl::StatusCode::kInvalidArgument);
  auto state = (*store)->Load();
  ASSERT_TRUE(state.ok());
  ASSERT_EQ(state->partitions.size(), 1u);
  EXPECT_EQ(state->partitions[0].size, 4);
  // The store still works after a failed write.
  EXPECT_TRUE((*store)->PutPartition(Partition("b", 4, 4)).ok());
}

// The child writes partitions p0, p1, ... and reports each acknowledged one
// on a pipe; the parent kills it with SIGKILL mid-stream. Every acknowledged
// write must be there after reopening, and the file must be intact.
TEST(SqliteStateStoreTest, SurvivesKillNineMidWrite) {
  TempDir dir;
  for (int round = 0; round < 3; ++round) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      auto store = SqliteStateStore::Open(dir.path());
      if (!store.ok()) _exit(3);
      for (int i = 0;; ++i) {
        std::string name = absl::StrCat("r", round, "p", i);
        if (!(*store)->PutPartition(Partition(name, i, 1)).ok()) _exit(4);
        if (!(*store)->NextBootId().ok()) _exit(5);
        if (write(fds[1], &i, sizeof i) != sizeof i) _exit(6);
      }
    }
    close(fds[1]);
    int acked = -1;
    int value = 0;
    while (acked < 20 + round * 7 && read(fds[0], &value, sizeof value) == sizeof value) {
      acked = value;
    }
    kill(pid, SIGKILL);
    while (read(fds[0], &value, sizeof value) == sizeof value) acked = value;  // drain
    close(fds[0]);
    int wstatus = 0;
    ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(wstatus)) << "child exited with " << WEXITSTATUS(wstatus);

    auto store = SqliteStateStore::Open(dir.path());
    ASSERT_TRUE(store.ok()) << store.status();
    auto state = (*store)->Load();
    ASSERT_TRUE(state.ok()) << state.status();
    int found = 0;
    for (const StoredPartition& p : state->partitions) {
      if (p.name.rfind(absl::StrCat("r", round, "p"), 0) == 0) ++found;
    }
    EXPECT_GE(found, acked + 1) << "round " << round;
    EXPECT_LE(found, acked + 2) << "round " << round;  // at most one unacknowledged commit
  }
}

}  // namespace
}  // namespace ipupod::store
