// The audit log in the state store: SqliteStateStore's audit::AuditLog
// methods and its retention purge. Appends go through the store's one
// writing connection, each one transaction at kAuditAppend, so a record is
// as durable as a partition before the action's answer is sent; queries
// through the reading connection. The append-only rule is the schema's
// (server/store/sqlite_audit.h): this file has no UPDATE, and its one DELETE runs
// under the purge's allowance. The cap evicts plain users' refusals before
// anything else (schema v5).
#include "server/store/sqlite_audit.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <sqlite3.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/sync.h"
#include "server/store/sqlite_state_store.h"
#include "server/store/sqlite_util.h"

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

AuditRecord ReadAuditRecord(const Statement& stmt) {
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

// A refusal: a refused call by a non-admin (server/store/sqlite_audit.h, v5). The
// partial index audit_refusals is on exactly this condition.
constexpr const char* kRefusal = "admin = 0 AND code <> 'OK'";

// The seq of the `n`th oldest record (of refusals only when `refusals`), or
// of the newest when there are fewer; 0 when there is none.
absl::StatusOr<int64_t> NthOldest(sqlite3* db, int64_t n, bool refusals) {
  const std::string where = refusals ? absl::StrCat(" WHERE ", kRefusal) : "";
  IPUPOD_ASSIGN_OR_RETURN(
      const int64_t nth,
      QueryInt(db, absl::StrCat("SELECT coalesce((SELECT seq FROM audit", where,
                                " ORDER BY seq LIMIT 1 OFFSET ", n - 1, "), 0)")));
  if (nth > 0) return nth;
  return QueryInt(db, absl::StrCat("SELECT coalesce(max(seq), 0) FROM audit", where));
}

// Deletes every record (every refusal when `refusals`) up to `upto` under
// the purge's allowance, gone again before the commit
// (server/store/sqlite_audit.h); returns how many.
absl::StatusOr<int> DeleteUpTo(sqlite3* db, int64_t upto, bool refusals) {
  if (upto <= 0) return 0;
  IPUPOD_ASSIGN_OR_RETURN(Statement allow,
                          Statement::Prepare(db, "INSERT INTO audit_purge VALUES(?1, ?2)"));
  IPUPOD_RETURN_IF_ERROR(allow.Bind(1, upto));
  IPUPOD_RETURN_IF_ERROR(allow.Bind(2, int64_t{refusals ? 1 : 0}));
  IPUPOD_RETURN_IF_ERROR(allow.Run());
  IPUPOD_ASSIGN_OR_RETURN(
      Statement purge,
      Statement::Prepare(db, absl::StrCat("DELETE FROM audit WHERE seq <= ?1",
                                          refusals ? absl::StrCat(" AND ", kRefusal) : "")));
  IPUPOD_RETURN_IF_ERROR(purge.Bind(1, upto));
  IPUPOD_RETURN_IF_ERROR(purge.Run());
  const int deleted = sqlite3_changes(db);
  IPUPOD_RETURN_IF_ERROR(Exec(db, "DELETE FROM audit_purge"));
  return deleted;
}

// Retention: every record older than the cut, oldest first, at most `budget`.
absl::StatusOr<int> PurgeByAge(sqlite3* db, int64_t before_unix_ms, int budget) {
  if (before_unix_ms <= 0) return 0;
  IPUPOD_ASSIGN_OR_RETURN(
      int64_t upto,
      QueryInt(db, absl::StrCat("SELECT coalesce(max(seq), 0) FROM audit WHERE time_unix_ms < ",
                                before_unix_ms)));
  if (upto == 0) return 0;
  IPUPOD_ASSIGN_OR_RETURN(const int64_t bound, NthOldest(db, budget, false));
  return DeleteUpTo(db, std::min(upto, bound), false);
}

// The cap: the records beyond the newest `keep_max`, at most `budget`,
// refusals first (oldest first), then, only if the others alone are over
// the cap, the oldest of those.
absl::StatusOr<int> PurgeOverCap(sqlite3* db, int64_t keep_max, int budget) {
  if (keep_max <= 0 || budget <= 0) return 0;
  IPUPOD_ASSIGN_OR_RETURN(const int64_t total, QueryInt(db, "SELECT count(*) FROM audit"));
  int64_t excess = std::min<int64_t>(total - keep_max, budget);
  if (excess <= 0) return 0;
  IPUPOD_ASSIGN_OR_RETURN(const int64_t refusals_upto, NthOldest(db, excess, true));
  IPUPOD_ASSIGN_OR_RETURN(const int refusals, DeleteUpTo(db, refusals_upto, true));
  excess -= refusals;
  if (excess <= 0) return refusals;
  IPUPOD_ASSIGN_OR_RETURN(const int64_t upto, NthOldest(db, excess, false));
  IPUPOD_ASSIGN_OR_RETURN(const int others, DeleteUpTo(db, upto, false));
  return refusals + others;
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
    page.records.push_back(ReadAuditRecord(stmt));
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
        IPUPOD_ASSIGN_OR_RETURN(purged, PurgeByAge(db, before_unix_ms, max_records));
        IPUPOD_ASSIGN_OR_RETURN(const int capped,
                                PurgeOverCap(db, keep_max_records, max_records - purged));
        purged += capped;
        return absl::OkStatus();
      });
  if (!written.ok()) return written;
  return purged;
}

}  // namespace ipupod::store
