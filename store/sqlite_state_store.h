// File: store/sqlite_state_store.h
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
// A version-1 file is migrated to version 2 (the jobs table) at Open.
//
// Every write is one transaction, and every durable write is a named write
// point (store/write_points.h) where tests can inject a crash or a failure.
// A second process (or a second Open in this one) on the same state_dir is
// refused: `<state_dir>/lock` is held with flock(2) for the store's lifetime,
// so two servers never share one pod state.
//
// A lost store is refused, never silently replaced by a new pod. The first
// Open of a directory gives the pod a random id, kept in the database and in
// `<state_dir>/state.marker` (store/state_marker.h) with the last boot. Open
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
// Thread safety: every method is safe to call concurrently (one internal
// mutex); the Scheduler calls it one call at a time anyway.
#ifndef IPUPOD_STORE_SQLITE_STATE_STORE_H_
#define IPUPOD_STORE_SQLITE_STATE_STORE_H_

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "jobs/job.h"
#include "jobs/job_store.h"
#include "scheduler/state_store.h"
#include "store/state_marker.h"
#include "store/write_points.h"

struct sqlite3;

namespace ipupod::store {

struct StoreOptions {
  // Discard whatever state_dir holds (database, WAL, marker) and start a
  // new, empty pod: ipupodd --reinitialise. Logged as a warning.
  bool reinitialise = false;
  // TEST-ONLY: a crash or failure at one write point (store/write_points.h).
  std::optional<WriteFault> fault;
};

// The scheduler's state and the batch jobs share one database, one
// connection and one lost-store check: a job is acknowledged only once it is
// as durable as a partition.
class SqliteStateStore : public scheduler::StateStore, public jobs::JobStore {
 public:
  // The schema this build writes; a file with a larger user_version is
  // refused with FAILED_PRECONDITION (never downgraded or overwritten).
  static constexpr int kSchemaVersion = 2;

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

  mutable absl::Mutex mu_;
  sqlite3* const db_ ABSL_PT_GUARDED_BY(mu_);
  const int lock_fd_;
  const std::filesystem::path dir_;
  const std::string path_;
  WriteFaultInjector faults_ ABSL_GUARDED_BY(mu_);
  std::string pod_id_ ABSL_GUARDED_BY(mu_);
  bool opened_ ABSL_GUARDED_BY(mu_) = false;  // passed the lost-store checks
};

}  // namespace ipupod::store

#endif  // IPUPOD_STORE_SQLITE_STATE_STORE_H_
