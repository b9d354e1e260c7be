// File: server/store/sqlite_audit.h
//
// Internal to server/store/: the audit log's tables (schema versions 4 and 5), which
// Migrate creates; the statements live in server/store/sqlite_audit.cc as
// SqliteStateStore's audit::AuditLog methods and its retention purge.
//
// Append-only, enforced by the database rather than hoped for: a trigger
// refuses every UPDATE of `audit`, another every DELETE unless the purge
// allows it. The purge's allowance is a row in `audit_purge` naming the
// highest seq it may delete; PurgeAudit inserts it, deletes, and removes
// it again inside one transaction, so a committed database never holds
// it (a crash rolls all three back) and no other statement can delete a
// record. Since the allowance is "every seq up to N" (of every record, or
// of refusals only, v5), each class goes oldest first: the kept records
// are every record after the newest purged by retention, less the oldest
// refusals the cap took. (This guards against the server's own mistakes;
// whoever can write state.db can drop a trigger.)
//
// seq is AUTOINCREMENT: a purged seq is never handed out again. CHECKs
// keep impossible rows out (the bounds of scheduler/audit/audit_log.h); the indexes
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

// Version 5: retention classes. A record of a refused call by a non-admin
// (admin = 0, code not 'OK') is a refusal; every other record (admins',
// the server's, privileged actions that happened) is kept. The cap evicts
// refusals first, so what plain users cause never pushes out what admins
// and privileged actions wrote (scheduler/audit/audit_log.h). The purge's allowance
// gains `refusals_only`: with 1 it covers only refusals up to its seq, and
// the delete trigger checks that. The partial index finds the oldest
// refusals without reading the others. audit_purge is empty in every
// committed database, so it is simply made again.
inline constexpr const char* kSchemaV5 = R"sql(
CREATE INDEX audit_refusals ON audit(seq) WHERE admin = 0 AND code <> 'OK';
DROP TRIGGER audit_no_delete;
DROP TABLE audit_purge;
CREATE TABLE audit_purge (
  upto_seq INTEGER NOT NULL,
  refusals_only INTEGER NOT NULL CHECK (refusals_only IN (0, 1))
);
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
WHEN NOT EXISTS (SELECT 1 FROM audit_purge WHERE OLD.seq <= upto_seq
                 AND (refusals_only = 0 OR (OLD.admin = 0 AND OLD.code <> 'OK')))
BEGIN
  SELECT RAISE(ABORT, 'the audit log is append-only: records leave it only by its retention purge');
END;
PRAGMA user_version = 5;
)sql";

}  // namespace ipupod::store

#endif  // IPUPOD_STORE_SQLITE_AUDIT_H_
