// The audit log in the SQLite store (server/store/sqlite_audit.cc): records
// appended and read back oldest first, pages and their token, the filters;
// UPDATE and DELETE refused by the database's triggers whoever sends them;
// the retention and cap purges (oldest first, seqs never reused); bad
// records and a failed write changing nothing; a version-3 file migrated.
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

using audit::AuditPage;
using audit::AuditQuery;
using audit::AuditRecord;
using test_support::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kT0 = 1'800'000'000'000;  // some time in 2027, in ms

AuditRecord Record(int64_t time_ms, const std::string& user, absl::string_view action,
                   const std::string& target = "ipu 1") {
  AuditRecord r;
  r.time_unix_ms = time_ms;
  r.user = user;
  r.admin = user == "admin";
  r.peer = "ipv4:127.0.0.1:40000";
  r.action = std::string(action);
  r.target = target;
  r.details = "kind=ipu-reset";
  r.code = user == "admin" ? "OK" : "PERMISSION_DENIED";
  r.message = user == "admin" ? "" : "only an admin may inject faults";
  return r;
}

std::vector<int64_t> Seqs(const absl::StatusOr<AuditPage>& page) {
  std::vector<int64_t> seqs;
  if (!page.ok()) return {-1};
  for (const AuditRecord& r : page->records) seqs.push_back(r.seq);
  return seqs;
}

AuditQuery Limit(int limit) {
  AuditQuery q;
  q.limit = limit;
  return q;
}

// A raw statement on state.db, as any other program could send it.
std::string Exec(const std::string& file, const std::string& sql) {
  sqlite3* db = nullptr;
  if (sqlite3_open(file.c_str(), &db) != SQLITE_OK) return "cannot open";
  char* error = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  std::string out = rc == SQLITE_OK ? "OK" : (error != nullptr ? error : "error");
  sqlite3_free(error);
  sqlite3_close(db);
  return out;
}

class SqliteAuditTest : public ::testing::Test {
 protected:
  void SetUp() override { Reopen(); }
  void Reopen(StoreOptions options = {}) {
    store_.reset();
    auto opened = SqliteStateStore::Open(dir_.path(), options);
    ASSERT_TRUE(opened.ok()) << opened.status();
    store_ = *std::move(opened);
  }
  void AppendMany(int n, int64_t from_ms) {
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(store_->Append(Record(from_ms + i, "admin", audit::kIpuReset)).ok());
    }
  }

  TempDir dir_;
  std::unique_ptr<SqliteStateStore> store_;
};

TEST_F(SqliteAuditTest, AppendedRecordsReadBackOldestFirstWithEveryField) {
  EXPECT_EQ(*store_->Append(Record(kT0, "bob", audit::kFaultInject, "ipu 3")), 1);
  EXPECT_EQ(*store_->Append(Record(kT0 + 5, "admin", audit::kFaultInject, "ipu 3")), 2);
  Reopen();  // durable
  absl::StatusOr<AuditPage> page = store_->Query(AuditQuery());
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->records.size(), 2u);
  EXPECT_EQ(page->next_after_seq, 0);
  const AuditRecord& r = page->records[0];
  EXPECT_EQ(r.seq, 1);
  EXPECT_EQ(r.time_unix_ms, kT0);
  EXPECT_EQ(r.user, "bob");
  EXPECT_FALSE(r.admin);
  EXPECT_EQ(r.peer, "ipv4:127.0.0.1:40000");
  EXPECT_EQ(r.action, "fault.inject");
  EXPECT_EQ(r.target, "ipu 3");
  EXPECT_EQ(r.details, "kind=ipu-reset");
  EXPECT_EQ(r.code, "PERMISSION_DENIED");
  EXPECT_EQ(r.message, "only an admin may inject faults");
  EXPECT_TRUE(page->records[1].admin);
  EXPECT_EQ(page->records[1].code, "OK");
}

TEST_F(SqliteAuditTest, PagesFollowTheirTokenToTheEnd) {
  AppendMany(25, kT0);
  AuditQuery q = Limit(10);
  absl::StatusOr<AuditPage> first = store_->Query(q);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->records.size(), 10u);
  EXPECT_EQ(first->next_after_seq, 10);
  q.after_seq = first->next_after_seq;
  absl::StatusOr<AuditPage> second = store_->Query(q);
  EXPECT_EQ(Seqs(second).front(), 11);
  EXPECT_EQ(second->next_after_seq, 20);
  q.after_seq = second->next_after_seq;
  absl::StatusOr<AuditPage> last = store_->Query(q);
  EXPECT_EQ(Seqs(last), (std::vector<int64_t>{21, 22, 23, 24, 25}));
  EXPECT_EQ(last->next_after_seq, 0) << "no more";
  EXPECT_EQ(store_->Query(Limit(25))->next_after_seq, 0) << "exactly a page: no more";
}

TEST_F(SqliteAuditTest, FiltersByWindowUserAndAction) {
  ASSERT_TRUE(store_->Append(Record(kT0, "bob", audit::kFaultInject)).ok());           // 1
  ASSERT_TRUE(store_->Append(Record(kT0 + 1000, "admin", audit::kFaultInject)).ok());  // 2
  ASSERT_TRUE(store_->Append(Record(kT0 + 2000, "admin", audit::kPodReset)).ok());     // 3
  ASSERT_TRUE(store_->Append(Record(kT0 + 3000, "bob", audit::kPodReset)).ok());       // 4
  AuditQuery q;
  q.since_unix_ms = kT0 + 1000;
  EXPECT_THAT(Seqs(store_->Query(q)), ElementsAre(2, 3, 4));
  q.until_unix_ms = kT0 + 3000;
  EXPECT_THAT(Seqs(store_->Query(q)), ElementsAre(2, 3));
  q = AuditQuery();
  q.user = "bob";
  EXPECT_THAT(Seqs(store_->Query(q)), ElementsAre(1, 4));
  q.action = "pod.reset";
  EXPECT_THAT(Seqs(store_->Query(q)), ElementsAre(4));
  q = AuditQuery();
  q.action = "pod.reset";
  q.after_seq = 3;
  EXPECT_THAT(Seqs(store_->Query(q)), ElementsAre(4));
  q.action = "pod.rest";
  EXPECT_EQ(store_->Query(q).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SqliteAuditTest, TheDatabaseRefusesEveryUpdateAndDelete) {
  AppendMany(3, kT0);
  const std::string db = dir_.sub("state.db");
  EXPECT_THAT(Exec(db, "UPDATE audit SET code = 'OK', user = 'nobody' WHERE seq = 2"),
              HasSubstr("append-only: its records are never updated"));
  EXPECT_THAT(Exec(db, "DELETE FROM audit WHERE seq = 2"),
              HasSubstr("append-only: records leave it only by its retention purge"));
  EXPECT_THAT(Exec(db, "DELETE FROM audit"), HasSubstr("append-only"));
  // An allowance covers the oldest records only: seq 2 is not "up to 1".
  EXPECT_THAT(Exec(db,
                   "BEGIN; INSERT INTO audit_purge VALUES(1, 0); DELETE FROM audit WHERE seq = 2; "
                   "COMMIT;"),
              HasSubstr("append-only"));
  EXPECT_THAT(Seqs(store_->Query(AuditQuery())), ElementsAre(1, 2, 3));
  EXPECT_EQ(store_->Query(AuditQuery())->records[1].user, "admin");
}

TEST_F(SqliteAuditTest, RetentionAndTheCapPurgeTheOldestFirstAndSeqsAreNeverReused) {
  AppendMany(10, kT0);  // seqs 1..10 at kT0 + 0..9
  // Older than kT0 + 4: seqs 1-4; in batches of at most 3.
  EXPECT_EQ(*store_->PurgeAudit(kT0 + 4, 0, 3), 3);
  EXPECT_EQ(*store_->PurgeAudit(kT0 + 4, 0, 3), 1);
  EXPECT_EQ(*store_->PurgeAudit(kT0 + 4, 0, 3), 0);
  EXPECT_EQ(Seqs(store_->Query(AuditQuery())).front(), 5);
  // The cap: the newest 4 stay.
  EXPECT_EQ(*store_->PurgeAudit(0, 4, 100), 2);
  EXPECT_THAT(Seqs(store_->Query(AuditQuery())), ElementsAre(7, 8, 9, 10));
  EXPECT_EQ(*store_->PurgeAudit(0, 0, 100), 0) << "no bound: nothing is due";
  // The allowance never outlives its transaction: a delete is refused again.
  EXPECT_THAT(Exec(dir_.sub("state.db"), "DELETE FROM audit WHERE seq = 7"),
              HasSubstr("append-only"));
  // Everything purged: the next record still gets a new seq.
  EXPECT_EQ(*store_->PurgeAudit(kT0 + 100, 0, 100), 4);
  EXPECT_TRUE(store_->Query(AuditQuery())->records.empty());
  EXPECT_EQ(*store_->Append(Record(kT0 + 200, "admin", audit::kPodReset)), 11);
  EXPECT_EQ(store_->PurgeAudit(0, 0, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

// The cap evicts plain users' refusals first (schema v5): an admin's
// record older than all of them stays however many there are.
TEST_F(SqliteAuditTest, TheCapEvictsRefusalsBeforeAnyOtherRecord) {
  ASSERT_TRUE(store_->Append(Record(kT0, "admin", audit::kFaultInject)).ok());  // seq 1
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(store_->Append(Record(kT0 + 1 + i, "mallory", audit::kFaultInject)).ok());
  }
  ASSERT_TRUE(store_->Append(Record(kT0 + 30, "admin", audit::kPodReset)).ok());  // seq 22
  // Cap 5: 17 refusals go, in batches of at most 10, oldest first.
  EXPECT_EQ(*store_->PurgeAudit(0, 5, 10), 10);
  EXPECT_EQ(*store_->PurgeAudit(0, 5, 10), 7);
  EXPECT_EQ(*store_->PurgeAudit(0, 5, 10), 0);
  EXPECT_THAT(Seqs(store_->Query(AuditQuery())), ElementsAre(1, 19, 20, 21, 22));
  // Only when the others alone are over the cap do they go, oldest first.
  EXPECT_EQ(*store_->PurgeAudit(0, 1, 100), 4);
  EXPECT_THAT(Seqs(store_->Query(AuditQuery())), ElementsAre(22));
  // A refusals-only allowance covers no admin's record.
  EXPECT_THAT(Exec(dir_.sub("state.db"),
                   "BEGIN; INSERT INTO audit_purge VALUES(100, 1); DELETE FROM audit WHERE seq = "
                   "22; COMMIT;"),
              HasSubstr("append-only"));
}

TEST_F(SqliteAuditTest, BadRecordsAreRefusedAndChangeNothing) {
  AuditRecord r = Record(kT0, "admin", "rm.everything");
  EXPECT_EQ(store_->Append(r).status().code(), absl::StatusCode::kInvalidArgument);
  r = Record(kT0, "admin", audit::kPodReset);
  r.message = std::string(100000, 'm');  // not Bounded
  EXPECT_THAT(store_->Append(r).status().message(), HasSubstr("message is 100000 bytes"));
  EXPECT_EQ(store_->Append(audit::Bounded(r)).status(), absl::OkStatus());
  EXPECT_EQ(store_->Query(AuditQuery())->records.size(), 1u);
  AuditQuery q;
  q.limit = 1001;
  EXPECT_EQ(store_->Query(q).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SqliteAuditTest, AFailedAppendChangesNothing) {
  StoreOptions options;
  options.fault = WriteFault{WritePoint::kAuditAppend, 2, FaultAction::kFail};
  Reopen(options);
  ASSERT_TRUE(store_->Append(Record(kT0, "admin", audit::kPodReset)).ok());
  absl::StatusOr<int64_t> failed = store_->Append(Record(kT0 + 1, "admin", audit::kPodReset));
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(Seqs(store_->Query(AuditQuery())), ElementsAre(1));
  EXPECT_EQ(*store_->Append(Record(kT0 + 2, "admin", audit::kPodReset)), 2);
}

TEST(SqliteAuditMigrationTest, AVersionThreeDatabaseGainsTheAuditLogAndKeepsItsState) {
  TempDir dir;
  {
    auto store = SqliteStateStore::Open(dir.path());
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->PutPartition({"p", 0, 4, "alice", kT0}).ok());
    accounting::UsageRecord session;
    session.id = "s1-1";
    session.user = "alice";
    session.ipus = 1;
    session.submit_unix_ms = kT0;
    session.start_unix_ms = kT0;
    ASSERT_TRUE((*store)->Open(session).ok());
  }
  // What a version-3 server left: no audit tables.
  ASSERT_EQ(Exec(dir.sub("state.db"),
                 "DROP TABLE audit; DROP TABLE audit_purge; PRAGMA user_version = 3;"),
            "OK");
  auto store = SqliteStateStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->Load()->partitions.size(), 1u);
  EXPECT_EQ((*store)->Query(accounting::LedgerQuery())->size(), 1u);
  EXPECT_EQ(*(*store)->Append(Record(kT0, "admin", audit::kServerStart)), 1);
  store->reset();
  EXPECT_THAT(Exec(dir.sub("state.db"), "UPDATE audit SET code = 'X'"), HasSubstr("append-only"));
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir.sub("state.db").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* version = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &version, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(version), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(version, 0), SqliteStateStore::kSchemaVersion);
  EXPECT_EQ(SqliteStateStore::kSchemaVersion, 5);
  sqlite3_finalize(version);
  sqlite3_close(db);
}

// What a version-4 server left: the audit log without its classes. The
// migration keeps every record and the cap then evicts refusals first.
TEST(SqliteAuditMigrationTest, AVersionFourAuditLogGainsItsRetentionClasses) {
  TempDir dir;
  {
    auto store = SqliteStateStore::Open(dir.path());
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Append(Record(kT0, "admin", audit::kFaultInject)).ok());
    ASSERT_TRUE((*store)->Append(Record(kT0 + 1, "bob", audit::kFaultInject)).ok());
    ASSERT_TRUE((*store)->Append(Record(kT0 + 2, "bob", audit::kFaultInject)).ok());
  }
  ASSERT_EQ(Exec(dir.sub("state.db"),
                 "DROP INDEX audit_refusals; DROP TRIGGER audit_no_delete; DROP TABLE audit_purge; "
                 "CREATE TABLE audit_purge (upto_seq INTEGER NOT NULL); "
                 "CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit WHEN NOT EXISTS (SELECT 1 "
                 "FROM audit_purge WHERE OLD.seq <= upto_seq) BEGIN SELECT RAISE(ABORT, 'the audit "
                 "log is append-only'); END; PRAGMA user_version = 4;"),
            "OK");
  auto store = SqliteStateStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_THAT(Seqs((*store)->Query(AuditQuery())), ElementsAre(1, 2, 3));
  EXPECT_EQ(*(*store)->PurgeAudit(0, 1, 100), 2);
  EXPECT_THAT(Seqs((*store)->Query(AuditQuery())), ElementsAre(1));
}

}  // namespace
}  // namespace ipupod::store
