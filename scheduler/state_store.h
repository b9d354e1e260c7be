// File: scheduler/state_store.h
//
// What the Scheduler persists so that it survives a restart (including
// kill -9 at any moment): partitions with their owners, failed IPUs, and a
// boot counter that keeps session ids unique across restarts. Sessions are
// never persisted: device memory is volatile.
//
// The Scheduler writes through this interface *before* it changes its memory,
// so a failed write changes nothing. Implementations: store/SqliteStateStore
// (durable) and tests' in-memory fakes.
//
// Thread safety: the Scheduler calls it with its own mutex held, one call at
// a time; implementations need no locking of their own for that use.
#ifndef IPUPOD_SCHEDULER_STATE_STORE_H_
#define IPUPOD_SCHEDULER_STATE_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ipupod::scheduler {

struct StoredPartition {
  std::string name;
  int start = 0;
  int size = 0;
  std::string owner;
  int64_t created_unix_ms = 0;
};

struct StoredFailure {
  int ipu = 0;
  std::string reason;
};

struct StoredState {
  std::vector<StoredPartition> partitions;
  std::vector<StoredFailure> failures;
};

class StateStore {
 public:
  virtual ~StateStore() = default;
  virtual absl::StatusOr<StoredState> Load() = 0;
  // Increments and returns the persisted boot counter (1 on first start).
  virtual absl::StatusOr<uint64_t> NextBootId() = 0;
  virtual absl::Status PutPartition(const StoredPartition& partition) = 0;
  virtual absl::Status DeletePartition(absl::string_view name) = 0;
  virtual absl::Status PutFailure(const StoredFailure& failure) = 0;
  virtual absl::Status DeleteFailure(int ipu) = 0;
};

}  // namespace ipupod::scheduler

#endif  // IPUPOD_SCHEDULER_STATE_STORE_H_
