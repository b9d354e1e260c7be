// The usage ledger in the state store: SqliteStateStore's accounting::Ledger
// methods and the ledger's upkeep (heartbeat, retention). Writes go through
// the store's one writing connection, each one transaction at its write
// point; reads through the reading connection, so a long `ipupod usage`
// never holds up a grant.
#include "server/store/sqlite_ledger.h"

#include <cmath>
#include <functional>
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

using accounting::LedgerQuery;
using accounting::RecordKind;
using accounting::UsageRecord;

constexpr size_t kIdLengthMax = 128;

constexpr const char* kSelect =
    "SELECT id, kind, user, account, qos, job, partition, ipus, submit_unix_ms, start_unix_ms, "
    "end_unix_ms, ipu_seconds, state FROM usage";

absl::Status CheckRecord(const UsageRecord& r) {
  std::string problem;
  if (r.id.empty() || r.id.size() > kIdLengthMax) {
    problem = absl::StrCat("its id must be 1-", kIdLengthMax, " characters");
  } else if (r.user.empty()) {
    problem = "it names no user";
  } else if (r.ipus < 0 || !std::isfinite(r.ipu_seconds) || r.ipu_seconds < 0) {
    problem = "IPUs and IPU-seconds must not be negative";
  } else if (r.submit_unix_ms < 0 || r.start_unix_ms < 0 || r.end_unix_ms < 0) {
    problem = "times must not be negative";
  } else if (r.end_unix_ms != 0 && r.end_unix_ms < r.start_unix_ms) {
    problem = "it ends before it starts";
  }
  if (problem.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("usage record '", r.id.substr(0, kIdLengthMax), "': ", problem));
}

absl::Status BindRecord(Statement& stmt, const UsageRecord& r) {
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(1, r.id));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(2, accounting::RecordKindName(r.kind)));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(3, r.user));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(4, r.account));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(5, r.qos));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(6, r.job));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(7, r.partition));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(8, int64_t{r.ipus}));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(9, r.submit_unix_ms));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(10, r.start_unix_ms));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(11, r.end_unix_ms));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(12, r.ipu_seconds));
  return stmt.Bind(13, r.state);
}

// Writes `r` (INSERT, or INSERT OR REPLACE with `replace`).
absl::Status InsertRecord(sqlite3* db, const UsageRecord& r, bool replace) {
  IPUPOD_ASSIGN_OR_RETURN(
      Statement stmt,
      Statement::Prepare(db, absl::StrCat(replace ? "INSERT OR REPLACE" : "INSERT",
                                          " INTO usage(id, kind, user, account, qos, job, "
                                          "partition, ipus, submit_unix_ms, start_unix_ms, "
                                          "end_unix_ms, ipu_seconds, state) "
                                          "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, "
                                          "?12, ?13)")));
  IPUPOD_RETURN_IF_ERROR(BindRecord(stmt, r));
  return stmt.Run();
}

absl::StatusOr<UsageRecord> ReadRecord(const Statement& stmt) {
  UsageRecord r;
  r.id = stmt.Text(0);
  const std::string kind = stmt.Text(1);
  if (kind != "session" && kind != "job") {
    return absl::DataLossError(
        absl::StrCat("state store: usage record ", r.id, " has kind '", kind, "'"));
  }
  r.kind = kind == "job" ? RecordKind::kJob : RecordKind::kSession;
  r.user = stmt.Text(2);
  r.account = stmt.Text(3);
  r.qos = stmt.Text(4);
  r.job = stmt.Text(5);
  r.partition = stmt.Text(6);
  IPUPOD_ASSIGN_OR_RETURN(r.ipus, ToInt(stmt.Int64(7), "usage record IPUs"));
  r.submit_unix_ms = stmt.Int64(8);
  r.start_unix_ms = stmt.Int64(9);
  r.end_unix_ms = stmt.Int64(10);
  r.ipu_seconds = stmt.Double(11);
  r.state = stmt.Text(12);
  return r;
}

// The SELECT of `q`: only the conditions it sets, so SQLite can use the
// indexes; `ordered` for newest first (Query), else the cheapest order.
std::string QuerySql(const LedgerQuery& q, bool ordered) {
  std::vector<std::string> where;
  if (q.since_unix_ms > 0) where.emplace_back("(end_unix_ms = 0 OR end_unix_ms >= :since)");
  if (q.until_unix_ms > 0) {
    where.emplace_back(
        "(CASE WHEN start_unix_ms > 0 THEN start_unix_ms ELSE submit_unix_ms END) < :until");
  }
  if (!q.user.empty()) where.emplace_back("user = :user");
  if (!q.state.empty()) where.emplace_back("state = :state");
  if (q.kind) where.emplace_back("kind = :kind");
  std::string sql = kSelect;
  if (!where.empty()) absl::StrAppend(&sql, " WHERE ", absl::StrJoin(where, " AND "));
  if (ordered) absl::StrAppend(&sql, " ORDER BY submit_unix_ms DESC, id DESC");
  absl::StrAppend(&sql, " LIMIT :limit");
  return sql;
}

absl::Status BindQuery(Statement& stmt, const LedgerQuery& q) {
  IPUPOD_RETURN_IF_ERROR(stmt.BindIfPresent(":since", q.since_unix_ms));
  IPUPOD_RETURN_IF_ERROR(stmt.BindIfPresent(":until", q.until_unix_ms));
  IPUPOD_RETURN_IF_ERROR(stmt.BindIfPresent(":user", absl::string_view(q.user)));
  IPUPOD_RETURN_IF_ERROR(stmt.BindIfPresent(":state", absl::string_view(q.state)));
  if (q.kind)
    IPUPOD_RETURN_IF_ERROR(stmt.BindIfPresent(":kind", accounting::RecordKindName(*q.kind)));
  return stmt.BindIfPresent(":limit", int64_t{q.limit});
}

absl::Status CheckQuery(const LedgerQuery& q) {
  if (q.limit >= 1 && q.limit <= accounting::kMaxLedgerQueryLimit) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("usage query limit ", q.limit,
                                                 " is out of range: ask for 1 to ",
                                                 accounting::kMaxLedgerQueryLimit, " records"));
}

absl::Status NotOpen(absl::string_view id) {
  return absl::NotFoundError(absl::StrCat("there is no open usage record ",
                                          id.substr(0, kIdLengthMax),
                                          " (it was never opened, or it was closed already)"));
}

// Close's checks inside its transaction: the record is open and the end
// is not before its start.
absl::Status CheckClosable(sqlite3* db, absl::string_view id, int64_t end_unix_ms) {
  IPUPOD_ASSIGN_OR_RETURN(
      Statement stmt,
      Statement::Prepare(db, "SELECT start_unix_ms, end_unix_ms FROM usage WHERE id = ?1"));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(1, id));
  IPUPOD_ASSIGN_OR_RETURN(const bool row, stmt.Step());
  if (!row || stmt.Int64(1) != 0) return NotOpen(id);
  if (end_unix_ms < stmt.Int64(0)) {
    return absl::InvalidArgumentError(absl::StrCat("usage record ", id, ": the end ", end_unix_ms,
                                                   " is before its start ", stmt.Int64(0)));
  }
  return absl::OkStatus();
}

// Open's checks before its transaction.
absl::Status CheckOpenable(const UsageRecord& record) {
  IPUPOD_RETURN_IF_ERROR(CheckRecord(record));
  if (record.end_unix_ms != 0 || record.start_unix_ms <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "usage record ", record.id, ": an open record has a start and no end; Put ended ones"));
  }
  return absl::OkStatus();
}

// Open inside its transaction: ALREADY_EXISTS for an id that exists.
absl::Status OpenRow(sqlite3* db, const UsageRecord& record) {
  UsageRecord open = record;
  open.state = std::string(accounting::kStateRunning);
  IPUPOD_ASSIGN_OR_RETURN(Statement exists,
                          Statement::Prepare(db, "SELECT 1 FROM usage WHERE id = ?1"));
  IPUPOD_RETURN_IF_ERROR(exists.Bind(1, open.id));
  IPUPOD_ASSIGN_OR_RETURN(const bool found, exists.Step());
  if (found) {
    return absl::AlreadyExistsError(absl::StrCat("usage record ", open.id, " exists already"));
  }
  return InsertRecord(db, open, /*replace=*/false);
}

// Close's checks before its transaction.
absl::Status CheckClose(absl::string_view id, double ipu_seconds, absl::string_view state) {
  if (id.empty()) return NotOpen(id);
  if (state.empty() || state == accounting::kStateRunning || !std::isfinite(ipu_seconds) ||
      ipu_seconds < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("usage record ", id.substr(0, kIdLengthMax),
                     ": a close needs an end state other than RUNNING and IPU-seconds >= 0"));
  }
  return absl::OkStatus();
}

// Close inside its transaction.
absl::Status CloseRow(sqlite3* db, const accounting::RecordEnd& end) {
  IPUPOD_RETURN_IF_ERROR(CheckClosable(db, end.id, end.end_unix_ms));
  IPUPOD_ASSIGN_OR_RETURN(Statement stmt,
                          Statement::Prepare(db,
                                             "UPDATE usage SET end_unix_ms = ?2, "
                                             "ipu_seconds = ?3, state = ?4 WHERE id = ?1"));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(1, end.id));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(2, end.end_unix_ms));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(3, end.ipu_seconds));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(4, end.state));
  return stmt.Run();
}

// A batch's refusal of one change (it is left out, the others written),
// rather than a failure of the write itself (which fails them all).
bool Refused(const absl::Status& status) {
  return absl::IsAlreadyExists(status) || absl::IsNotFound(status) ||
         absl::IsInvalidArgument(status);
}

// Runs `apply(i)` for each of `n` changes whose `checked` status is OK, in one
// transaction at `point`; fills `checked` with each one's outcome.
void WriteBatch(sqlite3* db, WritePoint point, WriteFaultInjector& faults,
                std::vector<absl::Status>& checked,
                const std::function<absl::Status(size_t)>& apply) {
  std::vector<absl::Status> outcome = checked;
  const absl::Status written = WriteTransaction(db, point, faults, [&]() -> absl::Status {
    for (size_t i = 0; i < checked.size(); ++i) {
      if (!checked[i].ok()) continue;
      outcome[i] = apply(i);
      if (!outcome[i].ok() && !Refused(outcome[i])) return outcome[i];
    }
    return absl::OkStatus();
  });
  for (size_t i = 0; i < checked.size(); ++i) {
    if (checked[i].ok()) checked[i] = written.ok() ? outcome[i] : written;
  }
}

}  // namespace

absl::Status SqliteStateStore::Open(const UsageRecord& record) {
  IPUPOD_RETURN_IF_ERROR(CheckOpenable(record));
  sync::MutexLock lock(&mu_);
  sqlite3* db = db_;  // lambdas are outside clang's lock analysis
  return WriteTransaction(db, WritePoint::kLedgerOpen, faults_,
                          [&]() -> absl::Status { return OpenRow(db, record); });
}

absl::Status SqliteStateStore::Close(absl::string_view id, int64_t end_unix_ms, double ipu_seconds,
                                     absl::string_view state) {
  IPUPOD_RETURN_IF_ERROR(CheckClose(id, ipu_seconds, state));
  const accounting::RecordEnd end{std::string(id), end_unix_ms, ipu_seconds, std::string(state)};
  sync::MutexLock lock(&mu_);
  sqlite3* db = db_;  // lambdas are outside clang's lock analysis
  return WriteTransaction(db, WritePoint::kLedgerClose, faults_,
                          [&]() -> absl::Status { return CloseRow(db, end); });
}

std::vector<absl::Status> SqliteStateStore::OpenAll(const std::vector<UsageRecord>& records) {
  std::vector<absl::Status> checked;
  for (const UsageRecord& r : records) checked.push_back(CheckOpenable(r));
  sync::MutexLock lock(&mu_);
  sqlite3* db = db_;  // lambdas are outside clang's lock analysis
  WriteBatch(db, WritePoint::kLedgerOpen, faults_, checked,
             [&](size_t i) { return OpenRow(db, records[i]); });
  return checked;
}

std::vector<absl::Status> SqliteStateStore::CloseAll(
    const std::vector<accounting::RecordEnd>& ends) {
  std::vector<absl::Status> checked;
  for (const accounting::RecordEnd& e : ends) {
    checked.push_back(CheckClose(e.id, e.ipu_seconds, e.state));
  }
  sync::MutexLock lock(&mu_);
  sqlite3* db = db_;  // lambdas are outside clang's lock analysis
  WriteBatch(db, WritePoint::kLedgerClose, faults_, checked,
             [&](size_t i) { return CloseRow(db, ends[i]); });
  return checked;
}

absl::Status SqliteStateStore::Put(const UsageRecord& record) {
  IPUPOD_RETURN_IF_ERROR(CheckRecord(record));
  if (record.end_unix_ms == 0 || record.state.empty() ||
      record.state == accounting::kStateRunning) {
    return absl::InvalidArgumentError(absl::StrCat(
        "usage record ", record.id, ": Put writes an ended record (an end and an end state)"));
  }
  sync::MutexLock lock(&mu_);
  sqlite3* db = db_;  // lambdas are outside clang's lock analysis
  return WriteTransaction(db, WritePoint::kLedgerPut, faults_,
                          [&] { return InsertRecord(db, record, /*replace=*/true); });
}

absl::StatusOr<int> SqliteStateStore::CloseOpenRecords(int64_t end_unix_ms) {
  sync::MutexLock lock(&mu_);
  sqlite3* db = db_;  // lambdas are outside clang's lock analysis
  int closed = 0;
  const absl::Status written =
      WriteTransaction(db, WritePoint::kLedgerCloseOpen, faults_, [&]() -> absl::Status {
        IPUPOD_ASSIGN_OR_RETURN(
            Statement stmt,
            Statement::Prepare(db,
                               "UPDATE usage SET end_unix_ms = max(?1, start_unix_ms), "
                               "ipu_seconds = ipus * (max(?1, start_unix_ms) - start_unix_ms) "
                               "/ 1000.0, state = ?2 WHERE end_unix_ms = 0"));
        IPUPOD_RETURN_IF_ERROR(stmt.Bind(1, end_unix_ms));
        IPUPOD_RETURN_IF_ERROR(stmt.Bind(2, accounting::kStateServerRestart));
        IPUPOD_RETURN_IF_ERROR(stmt.Run());
        closed = sqlite3_changes(db);
        return absl::OkStatus();
      });
  if (!written.ok()) return written;
  return closed;
}

absl::StatusOr<std::vector<UsageRecord>> SqliteStateStore::Query(const LedgerQuery& query) {
  IPUPOD_RETURN_IF_ERROR(CheckQuery(query));
  sync::MutexLock lock(&read_mu_);
  IPUPOD_ASSIGN_OR_RETURN(Statement stmt,
                          Statement::Prepare(read_db_, QuerySql(query, /*ordered=*/true)));
  IPUPOD_RETURN_IF_ERROR(BindQuery(stmt, query));
  std::vector<UsageRecord> out;
  while (true) {
    IPUPOD_ASSIGN_OR_RETURN(const bool row, stmt.Step());
    if (!row) return out;
    IPUPOD_ASSIGN_OR_RETURN(UsageRecord r, ReadRecord(stmt));
    out.push_back(std::move(r));
  }
}

absl::Status SqliteStateStore::Scan(const LedgerQuery& query,
                                    const std::function<bool(const UsageRecord&)>& visit) {
  IPUPOD_RETURN_IF_ERROR(CheckQuery(query));
  sync::MutexLock lock(&read_mu_);
  IPUPOD_ASSIGN_OR_RETURN(Statement stmt,
                          Statement::Prepare(read_db_, QuerySql(query, /*ordered=*/false)));
  IPUPOD_RETURN_IF_ERROR(BindQuery(stmt, query));
  while (true) {
    IPUPOD_ASSIGN_OR_RETURN(const bool row, stmt.Step());
    if (!row) return absl::OkStatus();
    IPUPOD_ASSIGN_OR_RETURN(const UsageRecord r, ReadRecord(stmt));
    if (!visit(r)) return absl::OkStatus();
  }
}

absl::Status SqliteStateStore::PutHeartbeat(int64_t unix_ms) {
  sync::MutexLock lock(&mu_);
  sqlite3* db = db_;  // lambdas are outside clang's lock analysis
  return WriteTransaction(db, WritePoint::kHeartbeat, faults_,
                          [&] { return PutMeta(db, kHeartbeatKey, unix_ms); });
}

absl::StatusOr<int64_t> SqliteStateStore::LastHeartbeat() {
  sync::MutexLock lock(&mu_);
  return QueryInt(db_, absl::StrCat("SELECT coalesce((SELECT value FROM meta WHERE key = '",
                                    kHeartbeatKey, "'), 0)"));
}

absl::StatusOr<int> SqliteStateStore::PurgeUsage(int64_t ended_before_unix_ms, int max_records) {
  if (max_records < 1) return absl::InvalidArgumentError("purge at least one record at a time");
  sync::MutexLock lock(&mu_);
  sqlite3* db = db_;  // lambdas are outside clang's lock analysis
  int purged = 0;
  const absl::Status written =
      WriteTransaction(db, WritePoint::kLedgerPurge, faults_, [&]() -> absl::Status {
        IPUPOD_ASSIGN_OR_RETURN(
            Statement stmt,
            Statement::Prepare(db,
                               "DELETE FROM usage WHERE rowid IN (SELECT rowid FROM usage "
                               "WHERE end_unix_ms > 0 AND end_unix_ms < ?1 LIMIT ?2)"));
        IPUPOD_RETURN_IF_ERROR(stmt.Bind(1, ended_before_unix_ms));
        IPUPOD_RETURN_IF_ERROR(stmt.Bind(2, int64_t{max_records}));
        IPUPOD_RETURN_IF_ERROR(stmt.Run());
        purged = sqlite3_changes(db);
        return absl::OkStatus();
      });
  if (!written.ok()) return written;
  return purged;
}

}  // namespace ipupod::store
