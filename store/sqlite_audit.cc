// The audit log in the state store: SqliteStateStore's audit::AuditLog
// methods and its retention purge. Appends go through the store's one
// writing connection, each one transaction at kAuditAppend, so a record is
// as durable as a partition before the action's answer is sent; queries
// through the reading connection. The append-only rule is the schema's
// (store/sqlite_audit.h): this file has no UPDATE, and its one DELETE runs
// under the purge's allowance.
#include "store/sqlite_audit.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <sqlite3.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/sync.h"
#include "store/sqlite_state_store.h"
#include "store/sqlite_util.h"

namespace ipupod::store {
namespace {

using audit::AuditPage;
using audit::AuditQuery;
using audit::AuditRecord;

absl::Status InsertRecord(sqlite3* db, const AuditRecord& r) {
  IPUPOD_ASSIGN_OR_RETURN(
      Statement stmt,
      Statement::Prepare(db,
                         "INSERT INTO audit(time_unix_ms, user, admin, peer, action, target, "
                         "details, code, message) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(1, r.time_unix_ms));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(2, r.user));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(3, int64_t{r.admin ? 1 : 0}));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(4, r.peer));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(5, r.action));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(6, r.target));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(7, r.details));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(8, r.code));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(9, r.message));
  return stmt.Run();
}

AuditRecord ReadRecord(const Statement& stmt) {
  AuditRecord r;
  r.seq = stmt.Int64(0);
  r.time_unix_ms = stmt.Int64(1);
  r.user = stmt.Text(2);
  r.admin = stmt.Int64(3) != 0;
  r.peer = stmt.Text(4);
  r.action = stmt.Text(5);
  r.target = stmt.Text(6);
  r.details = stmt.Text(7);
  r.code = stmt.Text(8);
  r.message = stmt.Text(9);
  return r;
}

// Only the conditions `q` sets, so SQLite can use the indexes; one row more
// than the page says whether another page follows.
std::string QuerySql(const AuditQuery& q) {
  std::vector<std::string> where = {"seq > :after"};
  if (q.since_unix_ms > 0) where.emplace_back("time_unix_ms >= :since");
  if (q.until_unix_ms > 0) where.emplace_back("time_unix_ms < :until");
  if (!q.user.empty()) where.emplace_back("user = :user");
  if (!q.action.empty()) where.emplace_back("action = :action");
  return absl::StrCat(
      "SELECT seq, time_unix_ms, user, admin, peer, action, target, details, code, message "
      "FROM audit WHERE ",
      absl::StrJoin(where, " AND "), " ORDER BY seq LIMIT :limit");
}

absl::Status BindQuery(Statement& stmt, const AuditQuery& q) {
  IPUPOD_RETURN_IF_ERROR(stmt.BindIfPresent(":after", q.after_seq));
  IPUPOD_RETURN_IF_ERROR(stmt.BindIfPresent(":since", q.since_unix_ms));
  IPUPOD_RETURN_IF_ERROR(stmt.BindIfPresent(":until", q.until_unix_ms));
  IPUPOD_RETURN_IF_ERROR(stmt.BindIfPresent(":user", absl::string_view(q.user)));
  IPUPOD_RETURN_IF_ERROR(stmt.BindIfPresent(":action", absl::string_view(q.action)));
  return stmt.BindIfPresent(":limit", int64_t{q.limit} + 1);
}

// The highest seq the purge deletes: every record older than the cut, and
// every record beyond the newest `keep_max` (the kept records are one run
// of seqs, so max - keep_max leaves exactly keep_max), at most `max_records`
// from the oldest. 0 when nothing is due.
absl::StatusOr<int64_t> PurgeUpTo(sqlite3* db, int64_t before_unix_ms, int64_t keep_max,
                                  int max_records) {
  IPUPOD_ASSIGN_OR_RETURN(const int64_t first,
                          QueryInt(db, "SELECT coalesce(min(seq), 0) FROM audit"));
  if (first == 0) return 0;  // empty
  int64_t upto = 0;
  if (before_unix_ms > 0) {
    IPUPOD_ASSIGN_OR_RETURN(
        upto, QueryInt(db, absl::StrCat("SELECT coalesce(max(seq), 0) FROM audit WHERE "
                                        "time_unix_ms < ",
                                        before_unix_ms)));
  }
  if (keep_max > 0) {
    IPUPOD_ASSIGN_OR_RETURN(const int64_t last,
                            QueryInt(db, "SELECT coalesce(max(seq), 0) FROM audit"));
    upto = std::max(upto, last - keep_max);
  }
  if (upto < first) return 0;
  return std::min(upto, first + max_records - 1);
}

}  // namespace

absl::StatusOr<int64_t> SqliteStateStore::Append(const AuditRecord& record) {
  IPUPOD_RETURN_IF_ERROR(audit::CheckRecord(record));
  sync::MutexLock lock(&mu_);
  sqlite3* db = db_;  // lambdas are outside clang's lock analysis
  int64_t seq = 0;
  const absl::Status written =
      WriteTransaction(db, WritePoint::kAuditAppend, faults_, [&]() -> absl::Status {
        IPUPOD_RETURN_IF_ERROR(InsertRecord(db, record));
        seq = sqlite3_last_insert_rowid(db);
        return absl::OkStatus();
      });
  if (!written.ok()) return written;
  return seq;
}

absl::StatusOr<AuditPage> SqliteStateStore::Query(const AuditQuery& query) {
  IPUPOD_RETURN_IF_ERROR(audit::CheckQuery(query));
  sync::MutexLock lock(&read_mu_);
  IPUPOD_ASSIGN_OR_RETURN(Statement stmt, Statement::Prepare(read_db_, QuerySql(query)));
  IPUPOD_RETURN_IF_ERROR(BindQuery(stmt, query));
  AuditPage page;
  while (true) {
    IPUPOD_ASSIGN_OR_RETURN(const bool row, stmt.Step());
    if (!row) return page;
    if (page.records.size() == static_cast<size_t>(query.limit)) {
      page.next_after_seq = page.records.back().seq;  // one more matched
      return page;
    }
    page.records.push_back(ReadRecord(stmt));
  }
}

absl::StatusOr<int> SqliteStateStore::PurgeAudit(int64_t before_unix_ms, int64_t keep_max_records,
                                                 int max_records) {
  if (max_records < 1 || before_unix_ms < 0 || keep_max_records < 0) {
    return absl::InvalidArgumentError(
        "an audit purge takes at least one record at a time and no negative bounds");
  }
  sync::MutexLock lock(&mu_);
  sqlite3* db = db_;  // lambdas are outside clang's lock analysis
  int purged = 0;
  const absl::Status written =
      WriteTransaction(db, WritePoint::kAuditPurge, faults_, [&]() -> absl::Status {
        IPUPOD_ASSIGN_OR_RETURN(const int64_t upto,
                                PurgeUpTo(db, before_unix_ms, keep_max_records, max_records));
        if (upto == 0) return absl::OkStatus();
        // The allowance the delete trigger looks for, gone again before the
        // commit (store/sqlite_audit.h).
        IPUPOD_ASSIGN_OR_RETURN(Statement allow,
                                Statement::Prepare(db, "INSERT INTO audit_purge VALUES(?1)"));
        IPUPOD_RETURN_IF_ERROR(allow.Bind(1, upto));
        IPUPOD_RETURN_IF_ERROR(allow.Run());
        IPUPOD_ASSIGN_OR_RETURN(Statement purge,
                                Statement::Prepare(db, "DELETE FROM audit WHERE seq <= ?1"));
        IPUPOD_RETURN_IF_ERROR(purge.Bind(1, upto));
        IPUPOD_RETURN_IF_ERROR(purge.Run());
        purged = sqlite3_changes(db);
        return Exec(db, "DELETE FROM audit_purge");
      });
  if (!written.ok()) return written;
  return purged;
}

}  // namespace ipupod::store
