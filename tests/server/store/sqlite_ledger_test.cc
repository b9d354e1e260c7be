// The usage ledger in the SQLite store (server/store/sqlite_ledger.cc): records
// opened, closed and put; queries and their filters; the SERVER_RESTART
// rule; the heartbeat; retention; the migration of a version-2 file; and
// the errors of bad input, each changing nothing.
#include <string>
#include <vector>

#include <sqlite3.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/store/sqlite_state_store.h"
#include "tests/support/temp_dir.h"

namespace ipupod::store {
namespace {

using accounting::LedgerQuery;
using accounting::RecordKind;
using accounting::UsageRecord;
using test_support::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kT0 = 1'800'000'000'000;  // some time in 2027, in ms

UsageRecord Session(const std::string& id, const std::string& user, int64_t start_ms,
                    int ipus = 4) {
  UsageRecord r;
  r.id = id;
  r.user = user;
  r.account = user == "carol" ? "speech" : "vision";
  r.qos = "normal";
  r.ipus = ipus;
  r.submit_unix_ms = start_ms - 1000;
  r.start_unix_ms = start_ms;
  r.state = "RUNNING";
  return r;
}

UsageRecord Job(const std::string& id, int64_t submit_ms, int64_t end_ms) {
  UsageRecord r;
  r.id = id;
  r.kind = RecordKind::kJob;
  r.user = "alice";
  r.account = "vision";
  r.qos = "scavenger";
  r.ipus = 2;
  r.submit_unix_ms = submit_ms;
  r.start_unix_ms = submit_ms + 500;
  r.end_unix_ms = end_ms;
  r.ipu_seconds = 2 * (end_ms - submit_ms - 500) / 1000.0;
  r.state = "COMPLETED";
  return r;
}

std::vector<std::string> Ids(const absl::StatusOr<std::vector<UsageRecord>>& records) {
  std::vector<std::string> ids;
  if (!records.ok()) return {records.status().ToString()};
  for (const UsageRecord& r : *records) ids.push_back(r.id);
  return ids;
}

class SqliteLedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = SqliteStateStore::Open(dir_.path());
    ASSERT_TRUE(opened.ok()) << opened.status();
    store_ = *std::move(opened);
  }
  absl::StatusOr<std::vector<UsageRecord>> All() { return store_->Query(LedgerQuery()); }

  TempDir dir_;
  std::unique_ptr<SqliteStateStore> store_;
};

TEST_F(SqliteLedgerTest, AnOpenedRecordRunsUntilClosedAndKeepsEveryField) {
  UsageRecord s = Session("s1-1", "alice", kT0);
  s.job = "7";
  s.partition = "p1";
  ASSERT_TRUE(store_->Open(s).ok());
  auto records = All();
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ((*records)[0].state, "RUNNING");
  EXPECT_EQ((*records)[0].end_unix_ms, 0);

  ASSERT_TRUE(store_->Close("s1-1", kT0 + 90'000, 360, "RELEASED").ok());
  records = All();
  ASSERT_EQ(records->size(), 1u);
  const UsageRecord& r = (*records)[0];
  EXPECT_EQ(r.id, "s1-1");
  EXPECT_EQ(r.kind, RecordKind::kSession);
  EXPECT_EQ(r.user, "alice");
  EXPECT_EQ(r.account, "vision");
  EXPECT_EQ(r.qos, "normal");
  EXPECT_EQ(r.job, "7");
  EXPECT_EQ(r.partition, "p1");
  EXPECT_EQ(r.ipus, 4);
  EXPECT_EQ(r.submit_unix_ms, kT0 - 1000);
  EXPECT_EQ(r.start_unix_ms, kT0);
  EXPECT_EQ(r.end_unix_ms, kT0 + 90'000);
  EXPECT_DOUBLE_EQ(r.ipu_seconds, 360);
  EXPECT_EQ(r.state, "RELEASED");
}

TEST_F(SqliteLedgerTest, RecordsSurviveReopening) {
  ASSERT_TRUE(store_->Open(Session("s1-1", "alice", kT0)).ok());
  ASSERT_TRUE(store_->Put(Job("3", kT0, kT0 + 60'000)).ok());
  store_.reset();
  auto reopened = SqliteStateStore::Open(dir_.path());
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  store_ = *std::move(reopened);
  EXPECT_THAT(Ids(All()), ElementsAre("3", "s1-1"));
}

TEST_F(SqliteLedgerTest, QueryFiltersByWindowUserStateAndKindNewestFirst) {
  ASSERT_TRUE(store_->Open(Session("s1-1", "alice", kT0)).ok());
  ASSERT_TRUE(store_->Close("s1-1", kT0 + 10'000, 40, "RELEASED").ok());
  ASSERT_TRUE(store_->Open(Session("s1-2", "carol", kT0 + 20'000)).ok());
  ASSERT_TRUE(store_->Close("s1-2", kT0 + 30'000, 40, "DETACHED").ok());
  ASSERT_TRUE(store_->Open(Session("s1-3", "alice", kT0 + 40'000)).ok());  // open
  ASSERT_TRUE(store_->Put(Job("4", kT0 + 5'000, kT0 + 50'000)).ok());

  EXPECT_THAT(Ids(All()), ElementsAre("s1-3", "s1-2", "4", "s1-1"));
  LedgerQuery q;
  q.since_unix_ms = kT0 + 25'000;  // ended at or after, and the open one
  EXPECT_THAT(Ids(store_->Query(q)), ElementsAre("s1-3", "s1-2", "4"));
  q = LedgerQuery();
  q.until_unix_ms = kT0 + 20'000;  // started before
  EXPECT_THAT(Ids(store_->Query(q)), ElementsAre("4", "s1-1"));
  q = LedgerQuery();
  q.user = "alice";
  EXPECT_THAT(Ids(store_->Query(q)), ElementsAre("s1-3", "4", "s1-1"));
  q.state = "RUNNING";
  EXPECT_THAT(Ids(store_->Query(q)), ElementsAre("s1-3"));
  q = LedgerQuery();
  q.kind = RecordKind::kJob;
  EXPECT_THAT(Ids(store_->Query(q)), ElementsAre("4"));
  q = LedgerQuery();
  q.limit = 2;
  EXPECT_THAT(Ids(store_->Query(q)), ElementsAre("s1-3", "s1-2"));
}

TEST_F(SqliteLedgerTest, ScanVisitsAtMostTheLimitAndStopsWhenAsked) {
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(store_->Put(Job(absl::StrCat(i), kT0 + i, kT0 + 10'000)).ok());
  }
  int seen = 0;
  LedgerQuery q;
  q.limit = 3;
  ASSERT_TRUE(store_->Scan(q, [&](const UsageRecord&) { return ++seen < 100; }).ok());
  EXPECT_EQ(seen, 3);
  seen = 0;
  ASSERT_TRUE(store_->Scan(LedgerQuery(), [&](const UsageRecord&) { return ++seen < 2; }).ok());
  EXPECT_EQ(seen, 2);
}

TEST_F(SqliteLedgerTest, CloseOfARecordThatIsNotOpenIsNotFound) {
  EXPECT_EQ(store_->Close("s9-9", kT0, 0, "RELEASED").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Close("", kT0, 0, "RELEASED").code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(store_->Open(Session("s1-1", "alice", kT0)).ok());
  ASSERT_TRUE(store_->Close("s1-1", kT0 + 1000, 4, "RELEASED").ok());
  const absl::Status twice = store_->Close("s1-1", kT0 + 5000, 20, "DETACHED");
  EXPECT_EQ(twice.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(twice.message(), HasSubstr("no open usage record s1-1"));
  auto records = All();
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ((*records)[0].state, "RELEASED");  // the second close changed nothing
  EXPECT_EQ((*records)[0].end_unix_ms, kT0 + 1000);
}

TEST_F(SqliteLedgerTest, BadRecordsAreRefusedAndChangeNothing) {
  ASSERT_TRUE(store_->Open(Session("s1-1", "alice", kT0)).ok());
  EXPECT_EQ(store_->Open(Session("s1-1", "bob", kT0)).code(), absl::StatusCode::kAlreadyExists);
  UsageRecord bad = Session("", "alice", kT0);
  EXPECT_EQ(store_->Open(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = Session("s1-2", "alice", kT0, -1);
  EXPECT_EQ(store_->Open(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = Session("s1-2", "alice", kT0);
  bad.end_unix_ms = kT0 + 1;  // an open record has no end
  EXPECT_EQ(store_->Open(bad).code(), absl::StatusCode::kInvalidArgument);
  UsageRecord job = Job("5", kT0, kT0 + 1000);
  job.end_unix_ms = 0;  // Put writes ended records only
  EXPECT_EQ(store_->Put(job).code(), absl::StatusCode::kInvalidArgument);
  job = Job("5", kT0, kT0 + 1000);
  job.ipu_seconds = -3;
  EXPECT_EQ(store_->Put(job).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Close("s1-1", kT0 - 1, 0, "RELEASED").code(),
            absl::StatusCode::kInvalidArgument);  // before its start
  EXPECT_EQ(store_->Close("s1-1", kT0 + 1, 0, "RUNNING").code(),
            absl::StatusCode::kInvalidArgument);
  LedgerQuery q;
  q.limit = 0;
  EXPECT_EQ(store_->Query(q).status().code(), absl::StatusCode::kInvalidArgument);
  q.limit = accounting::kMaxLedgerQueryLimit + 1;
  EXPECT_EQ(store_->Query(q).status().code(), absl::StatusCode::kInvalidArgument);
  auto records = All();
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ((*records)[0].user, "alice");
  EXPECT_EQ((*records)[0].state, "RUNNING");
}

TEST_F(SqliteLedgerTest, PutReplacesTheRecordOfTheSameId) {
  ASSERT_TRUE(store_->Put(Job("6", kT0, kT0 + 1000)).ok());
  UsageRecord again = Job("6", kT0, kT0 + 9000);
  again.state = "FAILED";
  ASSERT_TRUE(store_->Put(again).ok());
  auto records = All();
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ((*records)[0].state, "FAILED");
  EXPECT_EQ((*records)[0].end_unix_ms, kT0 + 9000);
}

TEST_F(SqliteLedgerTest, OpenRecordsEndAtTheHeartbeatAsServerRestart) {
  ASSERT_TRUE(store_->Open(Session("s1-1", "alice", kT0, 4)).ok());
  ASSERT_TRUE(store_->Open(Session("s1-2", "carol", kT0 + 50'000, 2)).ok());  // after it
  ASSERT_TRUE(store_->Open(Session("s1-3", "alice", kT0, 1)).ok());
  ASSERT_TRUE(store_->Close("s1-3", kT0 + 5000, 5, "RELEASED").ok());
  auto closed = store_->CloseOpenRecords(kT0 + 30'000);
  ASSERT_TRUE(closed.ok()) << closed.status();
  EXPECT_EQ(*closed, 2);
  auto records = All();
  ASSERT_TRUE(records.ok());
  for (const UsageRecord& r : *records) {
    if (r.id == "s1-1") {
      EXPECT_EQ(r.state, "SERVER_RESTART");
      EXPECT_EQ(r.end_unix_ms, kT0 + 30'000);
      EXPECT_DOUBLE_EQ(r.ipu_seconds, 4 * 30.0);
    } else if (r.id == "s1-2") {  // opened after the last heartbeat: ends at its start
      EXPECT_EQ(r.state, "SERVER_RESTART");
      EXPECT_EQ(r.end_unix_ms, kT0 + 50'000);
      EXPECT_DOUBLE_EQ(r.ipu_seconds, 0);
    } else {
      EXPECT_EQ(r.state, "RELEASED");
      EXPECT_EQ(r.end_unix_ms, kT0 + 5000);
    }
  }
  EXPECT_EQ(*store_->CloseOpenRecords(kT0 + 60'000), 0);  // nothing open now
}

TEST_F(SqliteLedgerTest, TheHeartbeatIsKeptAcrossReopening) {
  EXPECT_EQ(*store_->LastHeartbeat(), 0);
  ASSERT_TRUE(store_->PutHeartbeat(kT0).ok());
  ASSERT_TRUE(store_->PutHeartbeat(kT0 + 60'000).ok());
  store_.reset();
  auto reopened = SqliteStateStore::Open(dir_.path());
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ(*(*reopened)->LastHeartbeat(), kT0 + 60'000);
}

TEST_F(SqliteLedgerTest, PurgeDeletesEndedRecordsBeforeTheCutInBoundedBatches) {
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(store_->Put(Job(absl::StrCat("old", i), kT0, kT0 + 1000 + i)).ok());
  }
  ASSERT_TRUE(store_->Put(Job("new", kT0, kT0 + 90'000)).ok());
  ASSERT_TRUE(store_->Open(Session("s1-1", "alice", kT0)).ok());  // open: never purged
  EXPECT_EQ(*store_->PurgeUsage(kT0 + 10'000, 3), 3);
  EXPECT_EQ(*store_->PurgeUsage(kT0 + 10'000, 3), 2);
  EXPECT_EQ(*store_->PurgeUsage(kT0 + 10'000, 3), 0);
  EXPECT_THAT(Ids(All()), ElementsAre("new", "s1-1"));
  EXPECT_EQ(store_->PurgeUsage(kT0, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SqliteLedgerTest, AFailedWriteChangesNothing) {
  store_.reset();
  StoreOptions options;
  options.fault = WriteFault{WritePoint::kLedgerClose, 1, FaultAction::kFail};
  auto opened = SqliteStateStore::Open(dir_.path(), options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  store_ = *std::move(opened);
  ASSERT_TRUE(store_->Open(Session("s1-1", "alice", kT0)).ok());
  EXPECT_EQ(store_->Close("s1-1", kT0 + 1000, 4, "RELEASED").code(),
            absl::StatusCode::kUnavailable);
  auto records = All();
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ((*records)[0].state, "RUNNING");
  ASSERT_TRUE(store_->Close("s1-1", kT0 + 1000, 4, "RELEASED").ok());  // the next one is not
}

TEST(SqliteLedgerMigrationTest, AVersionTwoDatabaseGainsTheLedgerAndKeepsItsState) {
  TempDir dir;
  {
    auto store = SqliteStateStore::Open(dir.path());
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->PutPartition({"p", 0, 4, "alice", kT0}).ok());
    jobs::JobRecord job;
    job.id = "1";
    job.user = "alice";
    ASSERT_TRUE((*store)->PutJobs({job}).ok());
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir.sub("state.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(
      sqlite3_exec(
          db,
          "DROP TABLE usage; DROP TABLE audit; DROP TABLE audit_purge; PRAGMA user_version = 2;",
          nullptr, nullptr, nullptr),
      SQLITE_OK);
  sqlite3_close(db);
  auto store = SqliteStateStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->Load()->partitions.size(), 1u);
  EXPECT_EQ((*store)->LoadJobs()->size(), 1u);
  ASSERT_TRUE((*store)->Open(Session("s2-1", "alice", kT0)).ok());
  EXPECT_EQ((*store)->Query(LedgerQuery())->size(), 1u);
  store->reset();
  ASSERT_EQ(sqlite3_open(dir.sub("state.db").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* version = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &version, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(version), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(version, 0), SqliteStateStore::kSchemaVersion);
  sqlite3_finalize(version);
  sqlite3_close(db);
}

}  // namespace
}  // namespace ipupod::store
