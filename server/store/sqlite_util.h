// File: server/store/sqlite_util.h
//
// The SQLite plumbing every table of the state store shares (internal to
// server/store/): sqlite result codes as absl::Status codes, one prepared
// Statement, Exec, the write transaction at a named write point, the meta
// table's key/value rows, and integer checks on what is read back.
//
// Errors: SqliteError maps codes as server/store/sqlite_state_store.h documents
// (CANTOPEN/READONLY/PERM -> FAILED_PRECONDITION, NOTADB/CORRUPT ->
// DATA_LOSS, FULL -> RESOURCE_EXHAUSTED, BUSY/LOCKED/IOERR -> UNAVAILABLE,
// CONSTRAINT -> INVALID_ARGUMENT, the rest INTERNAL), naming the file.
//
// Thread safety: none of its own; a connection is used by one thread at a
// time (the store serialises each connection under a mutex).
#ifndef IPUPOD_STORE_SQLITE_UTIL_H_
#define IPUPOD_STORE_SQLITE_UTIL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include <sqlite3.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "server/store/write_points.h"

namespace ipupod::store {

absl::StatusCode CodeOf(int rc);

// The sqlite message of `rc` on `db`, with what we were doing and the file.
absl::Status SqliteError(sqlite3* db, int rc, absl::string_view what);

// One prepared statement; finalized on destruction.
class Statement {
 public:
  static absl::StatusOr<Statement> Prepare(sqlite3* db, absl::string_view sql);
  Statement(Statement&& other) noexcept
      : db_(other.db_), stmt_(std::exchange(other.stmt_, nullptr)) {}
  Statement& operator=(Statement&&) = delete;
  Statement(const Statement&) = delete;
  ~Statement() { sqlite3_finalize(stmt_); }

  absl::Status Bind(int index, absl::string_view text);
  absl::Status Bind(int index, int64_t value);
  absl::Status Bind(int index, double value);
  // The index of named parameter `name` (":since"), 0 when the SQL has none.
  int Parameter(const char* name) const { return sqlite3_bind_parameter_index(stmt_, name); }
  // Binds named parameter `name` when the SQL has it (a query's optional
  // conditions); OK otherwise.
  template <typename Value>
  absl::Status BindIfPresent(const char* name, const Value& value) {
    const int index = Parameter(name);
    return index > 0 ? Bind(index, value) : absl::OkStatus();
  }
  // True for a row, false when done.
  absl::StatusOr<bool> Step();
  // Steps until done, ignoring rows.
  absl::Status Run();
  int64_t Int64(int col) const { return sqlite3_column_int64(stmt_, col); }
  double Double(int col) const { return sqlite3_column_double(stmt_, col); }
  std::string Text(int col) const;

 private:
  Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  absl::Status Check(int rc, absl::string_view what);
  sqlite3* db_;
  sqlite3_stmt* stmt_;
};

absl::Status Exec(sqlite3* db, const char* sql);

// Runs `body` inside BEGIN IMMEDIATE .. COMMIT at write point `point`; rolls
// back when it (or an injected failure) fails, so a failed write changes
// nothing.
absl::Status WriteTransaction(sqlite3* db, WritePoint point, WriteFaultInjector& faults,
                              const std::function<absl::Status()>& body);

// Sets meta(key) to an integer or text value (inside a transaction).
template <typename Value>
absl::Status PutMeta(sqlite3* db, absl::string_view key, const Value& value) {
  IPUPOD_ASSIGN_OR_RETURN(
      Statement stmt,
      Statement::Prepare(db, "INSERT OR REPLACE INTO meta(key, value) VALUES(?1, ?2)"));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(1, key));
  IPUPOD_RETURN_IF_ERROR(stmt.Bind(2, value));
  return stmt.Run();
}

// The first column of the first row of `sql`; INTERNAL when there is none.
absl::StatusOr<int64_t> QueryInt(sqlite3* db, absl::string_view sql);

// `value` as an int; DATA_LOSS naming `what` when out of range.
absl::StatusOr<int> ToInt(int64_t value, absl::string_view what);

}  // namespace ipupod::store

#endif  // IPUPOD_STORE_SQLITE_UTIL_H_
