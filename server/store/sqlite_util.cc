#include "server/store/sqlite_util.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace ipupod::store {

absl::StatusCode CodeOf(int rc) {
  switch (rc & 0xff) {
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return absl::StatusCode::kFailedPrecondition;
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      return absl::StatusCode::kDataLoss;
    case SQLITE_FULL:
      return absl::StatusCode::kResourceExhausted;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_IOERR:
      return absl::StatusCode::kUnavailable;
    case SQLITE_CONSTRAINT:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status SqliteError(sqlite3* db, int rc, absl::string_view what) {
  const char* file = db != nullptr ? sqlite3_db_filename(db, "main") : nullptr;
  const char* msg = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  return absl::Status(CodeOf(rc), absl::StrCat("state store ", file ? file : "", ": ", what, ": ",
                                               msg, " (sqlite code ", rc, ")"));
}

absl::StatusOr<Statement> Statement::Prepare(sqlite3* db, absl::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK) return SqliteError(db, rc, absl::StrCat("prepare `", sql, "`"));
  return Statement(db, stmt);
}

absl::Status Statement::Bind(int index, absl::string_view text) {
  return Check(
      sqlite3_bind_text(stmt_, index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT),
      "bind");
}

absl::Status Statement::Bind(int index, int64_t value) {
  return Check(sqlite3_bind_int64(stmt_, index, value), "bind");
}

absl::Status Statement::Bind(int index, double value) {
  return Check(sqlite3_bind_double(stmt_, index, value), "bind");
}

absl::StatusOr<bool> Statement::Step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqliteError(db_, rc, absl::StrCat("run `", sqlite3_sql(stmt_), "`"));
}

absl::Status Statement::Run() {
  while (true) {
    IPUPOD_ASSIGN_OR_RETURN(bool row, Step());
    if (!row) return absl::OkStatus();
  }
}

std::string Statement::Text(int col) const {
  const unsigned char* text = sqlite3_column_text(stmt_, col);
  return text ? std::string(reinterpret_cast<const char*>(text),
                            static_cast<size_t>(sqlite3_column_bytes(stmt_, col)))
              : std::string();
}

absl::Status Statement::Check(int rc, absl::string_view what) {
  return rc == SQLITE_OK ? absl::OkStatus() : SqliteError(db_, rc, what);
}

absl::Status Exec(sqlite3* db, const char* sql) {
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
  return rc == SQLITE_OK ? absl::OkStatus() : SqliteError(db, rc, sql);
}

absl::Status WriteTransaction(sqlite3* db, WritePoint point, WriteFaultInjector& faults,
                              const std::function<absl::Status()>& body) {
  IPUPOD_RETURN_IF_ERROR(Exec(db, "BEGIN IMMEDIATE"));
  absl::Status status = body();
  if (status.ok()) status = faults.BeforeCommit(point);
  if (status.ok()) status = Exec(db, "COMMIT");
  if (!status.ok() && !sqlite3_get_autocommit(db)) {
    (void)Exec(db, "ROLLBACK");  // the first error is the one to report
  }
  if (status.ok()) faults.AfterCommit(point);
  return status;
}

absl::StatusOr<int64_t> QueryInt(sqlite3* db, absl::string_view sql) {
  IPUPOD_ASSIGN_OR_RETURN(Statement stmt, Statement::Prepare(db, sql));
  IPUPOD_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return absl::InternalError(absl::StrCat("state store: `", sql, "` returned no row"));
  return stmt.Int64(0);
}

absl::StatusOr<int> ToInt(int64_t value, absl::string_view what) {
  if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max()) {
    return absl::DataLossError(absl::StrCat("state store: ", what, " ", value, " is out of range"));
  }
  return static_cast<int>(value);
}

}  // namespace ipupod::store
