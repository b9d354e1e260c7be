// File: server/store/sqlite_state_store.h
//
// SqliteStateStore: the durable scheduler::StateStore, one SQLite file
// `<state_dir>/state.db` in WAL mode with synchronous=FULL, so a write that
// returned OK survives kill -9 (and power loss, as far as fsync does) and a
// write interrupted at any moment leaves the previous state intact.
//
// Layout (schema version kSchemaVersion, kept in PRAGMA user_version):
//   partitions(name PK, start, size, owner, created_unix_ms)
//   failures(ipu PK, reason)
//   meta(key PK, value)   -- "pod_id", "boot_count", "clean_stop" (the boot
//                            that last shut down in order), "job_count"
//   jobs(seq PK, id UNIQUE, user, state, record)  -- batch jobs (v2): the
//                            record is jobs::ToJson; seq keeps submission order
//   usage(id PK, kind, user, account, qos, job, partition, ipus, submit_unix_ms,
//         start_unix_ms, end_unix_ms, ipu_seconds, state)  -- the usage
//                            ledger (v3, scheduler/accounting/ledger.h), indexed by
//                            submit time, end time and user; meta keeps
//                            "heartbeat_unix_ms", the server's last sign of life
//   audit(seq PK AUTOINCREMENT, time_unix_ms, user, admin, peer, action, target,
//         details, code, message)  -- the audit log (v4, scheduler/audit/audit_log.h):
//                            append-only by triggers, audit_purge holding the
//                            retention purge's allowance (server/store/sqlite_audit.h);
//                            v5: refusals by plain users a retention class
//                            of their own, evicted first by the cap
// Older files are migrated at Open: each version gains what came after it
// (v1 the jobs table, v2 the usage table, v3 the audit log, v4 the audit
// log's classes), in one transaction.
//
// Every write is one transaction, and every durable write is a named write
// point (server/store/write_points.h) where tests can inject a crash or a failure.
// A second process (or a second Open in this one) on the same state_dir is
// refused: `<state_dir>/lock` is held with flock(2) for the store's lifetime,
// so two servers never share one pod state.
//
// A lost store is refused, never silently replaced by a new pod. The first
// Open of a directory gives the pod a random id, kept in the database and in
// `<state_dir>/state.marker` (server/store/state_marker.h) with the last boot. Open
// then refuses, with DATA_LOSS saying what it found and that
// StoreOptions::reinitialise (ipupodd --reinitialise) starts a new pod:
//   - the marker exists but state.db is missing or empty (0 bytes), or
//     holds no pod id (a new database was put in its place);
//   - state.db holds another pod's id;
//   - state.db's boot counter is behind the marker's (an older copy, or
//     its write-ahead log was lost after the last start);
//   - the last run did not shut down in order (no clean-stop record for its
//     boot) and state.db-wal is missing or empty: what it acknowledged since
//     the last checkpoint is gone.
// A corrupt boot counter (not a positive integer) is DATA_LOSS too, never a
// reset. A directory without a marker but with a database (made before the
// marker existed) is adopted: it gets an id and a marker. The destructor
// of a store that passed those checks records a clean stop of the current
// boot, then closes, which checkpoints the WAL into
// state.db and removes state.db-wal.
//
// Errors (absl::Status carrying the sqlite message and the file path):
//   FAILED_PRECONDITION  the dir or file cannot be created or opened, the
//                        schema is newer than this build, the dir is in use
//   DATA_LOSS            the file is not a database or is corrupt; the store
//                        was lost (above); a corrupt boot counter or marker
//   RESOURCE_EXHAUSTED   the disk is full
//   UNAVAILABLE          the database is locked (busy timeout passed)
//   INTERNAL             anything else sqlite reports
//
// The ledger's and the audit log's reads (Query, Scan: `ipupod usage`,
// `history`, `audit`) go through a second connection under their own mutex: in WAL mode a reader
// sees the last commit and neither waits for writes nor makes them wait.
//
// Thread safety: every method is safe to call concurrently (one internal
// mutex for writes and the scheduler's state, one for ledger reads).
#ifndef IPUPOD_STORE_SQLITE_STATE_STORE_H_
#define IPUPOD_STORE_SQLITE_STATE_STORE_H_

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "scheduler/accounting/ledger.h"
#include "scheduler/audit/audit_log.h"
#include "scheduler/state_store.h"
#include "server/jobs/job.h"
#include "server/jobs/job_store.h"
#include "server/store/state_marker.h"
#include "server/store/write_points.h"

struct sqlite3;

namespace ipupod::store {

struct StoreOptions {
  // Discard whatever state_dir holds (database, WAL, marker) and start a
  // new, empty pod: ipupodd --reinitialise. Logged as a warning.
  bool reinitialise = false;
  // TEST-ONLY: a crash or failure at one write point (server/store/write_points.h).
  std::optional<WriteFault> fault;
};

// The scheduler's state, the batch jobs, the usage ledger and the audit
// log share one database, one writing connection and one lost-store check:
// a job, a usage record or an audit record is acknowledged only once it is
// as durable as a partition.
class SqliteStateStore : public scheduler::StateStore,
                         public jobs::JobStore,
                         public accounting::Ledger,
                         public audit::AuditLog {
 public:
  // The schema this build writes; a file with a larger user_version is
  // refused with FAILED_PRECONDITION (never downgraded or overwritten).
  static constexpr int kSchemaVersion = 5;

  // Creates `state_dir` (and parents) if needed, opens or creates state.db,
  // migrates an empty file to kSchemaVersion, and checks it against the
  // state marker (above).
  static absl::StatusOr<std::unique_ptr<SqliteStateStore>> Open(absl::string_view state_dir,
                                                                StoreOptions options = {});

  ~SqliteStateStore() override;
  SqliteStateStore(const SqliteStateStore&) = delete;
  SqliteStateStore& operator=(const SqliteStateStore&) = delete;

  // Partitions in start order, failures in IPU order.
  absl::StatusOr<scheduler::StoredState> Load() override;
  absl::StatusOr<uint64_t> NextBootId() override;
  // Inserts or replaces the partition of that name.
  absl::Status PutPartition(const scheduler::StoredPartition& partition) override;
  // Deleting an absent partition is OK (idempotent).
  absl::Status DeletePartition(absl::string_view name) override;
  // Inserts or replaces the failure record of that IPU.
  absl::Status PutFailure(const scheduler::StoredFailure& failure) override;
  absl::Status DeleteFailure(int ipu) override;

  // jobs::JobStore: every write one transaction at its write point
  // (kJobNumber, kPutJobs, kDeleteJob).
  absl::StatusOr<std::vector<jobs::JobRecord>> LoadJobs() override;
  absl::StatusOr<int64_t> NextJobNumber() override;
  absl::Status PutJobs(absl::Span<const jobs::JobRecord> records) override;
  absl::Status DeleteJob(absl::string_view id) override;

  // accounting::Ledger (server/store/sqlite_ledger.cc): every write one
  // transaction at its write point (kLedgerOpen, kLedgerClose, kLedgerPut,
  // kLedgerCloseOpen). Bad records (no id, negative IPUs or IPU-seconds, an
  // end before the start) are INVALID_ARGUMENT; Open of an id that exists is
  // ALREADY_EXISTS; Close of an id that is not open is NOT_FOUND.
  absl::Status Open(const accounting::UsageRecord& record) override;
  absl::Status Close(absl::string_view id, int64_t end_unix_ms, double ipu_seconds,
                     absl::string_view state) override;
  // Many opens (closes) in one transaction at kLedgerOpen (kLedgerClose).
  std::vector<absl::Status> OpenAll(const std::vector<accounting::UsageRecord>& records) override;
  std::vector<absl::Status> CloseAll(const std::vector<accounting::RecordEnd>& ends) override;
  absl::Status Put(const accounting::UsageRecord& record) override;
  absl::StatusOr<std::vector<accounting::UsageRecord>> Query(
      const accounting::LedgerQuery& query) override;
  absl::Status Scan(const accounting::LedgerQuery& query,
                    const std::function<bool(const accounting::UsageRecord&)>& visit) override;
  // Ends each open record at max(end_unix_ms, its start), its IPU-seconds
  // counted to there.
  absl::StatusOr<int> CloseOpenRecords(int64_t end_unix_ms) override;

  // The ledger's upkeep (server/accounting_upkeep.h). The server's last
  // sign of life (meta "heartbeat_unix_ms", write point kHeartbeat); 0 when
  // none was ever written.
  absl::Status PutHeartbeat(int64_t unix_ms);
  absl::StatusOr<int64_t> LastHeartbeat();
  // Deletes at most `max_records` ended records whose end is before
  // `ended_before_unix_ms` (one transaction, kLedgerPurge, even when none
  // is due); returns how many. Open records are never purged.
  absl::StatusOr<int> PurgeUsage(int64_t ended_before_unix_ms, int max_records);

  // audit::AuditLog (server/store/sqlite_audit.cc): Append is one transaction at
  // kAuditAppend (INVALID_ARGUMENT for what audit::CheckRecord refuses);
  // Query reads the reading connection.
  absl::StatusOr<int64_t> Append(const audit::AuditRecord& record) override;
  absl::StatusOr<audit::AuditPage> Query(const audit::AuditQuery& query) override;
  // The audit log's retention (server/accounting_upkeep.h): deletes, oldest
  // first, the records older than `before_unix_ms` (0: none by time) and,
  // while there are more than `keep_max_records` (0: no cap), plain users'
  // refusals, then the others only if they alone are over it; at most
  // `max_records` in all (one transaction at kAuditPurge, even when none
  // is due); returns how many.
  absl::StatusOr<int> PurgeAudit(int64_t before_unix_ms, int64_t keep_max_records, int max_records);

  const std::string& path() const { return path_; }
  // The pod's id (32 hex digits), as in the database and the marker.
  std::string pod_id() const;

 private:
  struct DirFacts;
  SqliteStateStore(sqlite3* db, int lock_fd, std::filesystem::path dir,
                   std::optional<WriteFault> fault);

  // Checks the database against the marker (or adopts a directory without one).
  absl::Status Reconcile(const DirFacts& facts);
  absl::Status AdoptLocked(const std::string& pod_id, int64_t boot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteMarkerLocked(int64_t boot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status MarkCleanStopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Status LoadPartitionsLocked(scheduler::StoredState& state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status LoadFailuresLocked(scheduler::StoredState& state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The ledger's reading connection (opened last by Open, closed first).
  absl::Status OpenReader();

  mutable absl::Mutex mu_;
  sqlite3* const db_ ABSL_PT_GUARDED_BY(mu_);
  mutable absl::Mutex read_mu_;  // never held with mu_
  sqlite3* read_db_ ABSL_GUARDED_BY(read_mu_) = nullptr;
  const int lock_fd_;
  const std::filesystem::path dir_;
  const std::string path_;
  WriteFaultInjector faults_ ABSL_GUARDED_BY(mu_);
  std::string pod_id_ ABSL_GUARDED_BY(mu_);
  bool opened_ ABSL_GUARDED_BY(mu_) = false;  // passed the lost-store checks
};

}  // namespace ipupod::store

#endif  // IPUPOD_STORE_SQLITE_STATE_STORE_H_
