// File: server/store/sqlite_ledger.h
//
// Internal to server/store/: the usage ledger's table (schema version 3), which
// Migrate creates; the ledger's statements live in server/store/sqlite_ledger.cc
// as SqliteStateStore's accounting::Ledger methods.
//
// One row per session and per batch job (scheduler/accounting/ledger.h). CHECKs keep
// impossible rows out even if a caller slips; the indexes serve the
// queries: submit time (history, newest first), end time (the window's
// start, open records, retention) and user (a user's history).
#ifndef IPUPOD_STORE_SQLITE_LEDGER_H_
#define IPUPOD_STORE_SQLITE_LEDGER_H_

namespace ipupod::store {

inline constexpr const char* kSchemaV3 = R"sql(
CREATE TABLE usage (
  id TEXT PRIMARY KEY NOT NULL CHECK (length(id) > 0),
  kind TEXT NOT NULL CHECK (kind IN ('session', 'job')),
  user TEXT NOT NULL,
  account TEXT NOT NULL,
  qos TEXT NOT NULL,
  job TEXT NOT NULL,
  partition TEXT NOT NULL,
  ipus INTEGER NOT NULL CHECK (ipus >= 0),
  submit_unix_ms INTEGER NOT NULL,
  start_unix_ms INTEGER NOT NULL,
  end_unix_ms INTEGER NOT NULL CHECK (end_unix_ms = 0 OR end_unix_ms >= start_unix_ms),
  ipu_seconds REAL NOT NULL CHECK (ipu_seconds >= 0),
  state TEXT NOT NULL CHECK (length(state) > 0)
);
CREATE INDEX usage_by_submit ON usage(submit_unix_ms);
CREATE INDEX usage_by_end ON usage(end_unix_ms);
CREATE INDEX usage_by_user ON usage(user, submit_unix_ms);
PRAGMA user_version = 3;
)sql";

// The meta key of the server's last sign of life.
inline constexpr const char* kHeartbeatKey = "heartbeat_unix_ms";

}  // namespace ipupod::store

#endif  // IPUPOD_STORE_SQLITE_LEDGER_H_
