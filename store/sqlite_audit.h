// File: store/sqlite_audit.h
//
// Internal to store/: the audit log's tables (schema version 4), which
// Migrate creates; the statements live in store/sqlite_audit.cc as
// SqliteStateStore's audit::AuditLog methods and its retention purge.
//
// Append-only, enforced by the database rather than hoped for: a trigger
// refuses every UPDATE of `audit`, another every DELETE unless the purge
// allows it. The purge's allowance is a row in `audit_purge` naming the
// highest seq it may delete; PurgeAudit inserts it, deletes, and removes
// it again inside one transaction, so a committed database never holds
// it (a crash rolls all three back) and no other statement can delete a
// record. Since the allowance is "every seq up to N", records go oldest
// first and what is kept is always one unbroken run of seqs: a gap would
// show a record removed some other way. (This guards against the server's
// own mistakes; whoever can write state.db can drop a trigger.)
//
// seq is AUTOINCREMENT: a purged seq is never handed out again. CHECKs
// keep impossible rows out (the bounds of audit/audit_log.h); the indexes
// serve the time window and the user and action filters.
#ifndef IPUPOD_STORE_SQLITE_AUDIT_H_
#define IPUPOD_STORE_SQLITE_AUDIT_H_

namespace ipupod::store {

inline constexpr const char* kSchemaV4 = R"sql(
CREATE TABLE audit (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  time_unix_ms INTEGER NOT NULL CHECK (time_unix_ms >= 0),
  user TEXT NOT NULL CHECK (length(CAST(user AS BLOB)) <= 128),
  admin INTEGER NOT NULL CHECK (admin IN (0, 1)),
  peer TEXT NOT NULL CHECK (length(CAST(peer AS BLOB)) <= 128),
  action TEXT NOT NULL CHECK (length(action) BETWEEN 1 AND 128),
  target TEXT NOT NULL CHECK (length(CAST(target AS BLOB)) <= 256),
  details TEXT NOT NULL CHECK (length(CAST(details AS BLOB)) <= 512),
  code TEXT NOT NULL CHECK (length(code) BETWEEN 1 AND 128),
  message TEXT NOT NULL CHECK (length(CAST(message AS BLOB)) <= 512)
);
CREATE INDEX audit_by_time ON audit(time_unix_ms);
CREATE INDEX audit_by_user ON audit(user, seq);
CREATE INDEX audit_by_action ON audit(action, seq);
CREATE TABLE audit_purge (
  upto_seq INTEGER NOT NULL
);
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
BEGIN
  SELECT RAISE(ABORT, 'the audit log is append-only: its records are never updated');
END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
WHEN NOT EXISTS (SELECT 1 FROM audit_purge WHERE OLD.seq <= upto_seq)
BEGIN
  SELECT RAISE(ABORT, 'the audit log is append-only: records leave it only by its retention purge');
END;
PRAGMA user_version = 4;
)sql";

}  // namespace ipupod::store

#endif  // IPUPOD_STORE_SQLITE_AUDIT_H_
