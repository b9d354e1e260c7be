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
//   meta(key PK, value)          -- "boot_count"
//
// Every write is one transaction. A second process (or a second Open in
// this one) on the same state_dir is refused: `<state_dir>/lock` is held with
// flock(2) for the store's lifetime, so two servers never share one pod state.
//
// Errors (absl::Status carrying the sqlite message and the file path):
//   FAILED_PRECONDITION  the dir or file cannot be created or opened, the
//                        schema is newer than this build, the dir is in use
//   DATA_LOSS            the file is not a database or is corrupt
//   RESOURCE_EXHAUSTED   the disk is full
//   UNAVAILABLE          the database is locked (busy timeout passed)
//   INTERNAL             anything else sqlite reports
//
// Thread safety: every method is safe to call concurrently (one internal
// mutex); the Scheduler calls it one call at a time anyway.
#ifndef IPUPOD_STORE_SQLITE_STATE_STORE_H_
#define IPUPOD_STORE_SQLITE_STATE_STORE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "scheduler/state_store.h"

struct sqlite3;

namespace ipupod::store {

class SqliteStateStore : public scheduler::StateStore {
 public:
  // The schema this build writes; a file with a larger user_version is
  // refused with FAILED_PRECONDITION (never downgraded or overwritten).
  static constexpr int kSchemaVersion = 1;

  // Creates `state_dir` (and parents) if needed, opens or creates state.db,
  // and migrates an empty file to kSchemaVersion.
  static absl::StatusOr<std::unique_ptr<SqliteStateStore>> Open(absl::string_view state_dir);

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

  const std::string& path() const { return path_; }

 private:
  SqliteStateStore(sqlite3* db, int lock_fd, std::string path);

  absl::Status LoadPartitionsLocked(scheduler::StoredState& state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status LoadFailuresLocked(scheduler::StoredState& state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  sqlite3* const db_ ABSL_PT_GUARDED_BY(mu_);
  const int lock_fd_;
  const std::string path_;
};

}  // namespace ipupod::store

#endif  // IPUPOD_STORE_SQLITE_STATE_STORE_H_
