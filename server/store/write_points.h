// File: server/store/write_points.h
//
// Every durable write of the state store, listed in one place, and the
// test-only fault that can be injected at any of them.
//
// A write point is one place where the store makes something durable: an
// SQLite COMMIT or the atomic rename of the state marker. Crash-point tests
// (tests/integration/crash_points_test.cc) walk kAllWritePoints and, for
// each, kill the server just before or just after that write (or make it
// fail), restart, and check that every acknowledged change survived and no
// unacknowledged one half-applied. A new durable write (jobs, accounting)
// adds its point here and a step that reaches it to that test's workload.
//
// The fault comes from the environment variable IPUPOD_TEST_STORE_FAULT,
// "POINT:N:ACTION" (e.g. "put_partition:2:crash-before"): the Nth write at
// POINT (1-based, counted from the store's Open) crashes the process with
// SIGKILL just before its commit ("crash-before"), just after it
// ("crash-after"), or fails with UNAVAILABLE and changes nothing ("fail").
// TEST-ONLY: production never sets it; unset, each write costs one branch.
//
// Thread safety: WriteFaultInjector is not thread-safe; the store calls it
// under its own mutex. The free functions are pure.
// Errors: ParseWriteFault / WriteFaultFromEnvironment - INVALID_ARGUMENT for
// a malformed spec, naming the points and actions it accepts.
#ifndef IPUPOD_STORE_WRITE_POINTS_H_
#define IPUPOD_STORE_WRITE_POINTS_H_

#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ipupod::store {

enum class WritePoint {
  kInitialise,       // a new pod: schema and pod id (first start, --reinitialise)
  kBootCount,        // the boot counter, once per start
  kMarker,           // the state marker beside the database (after kInitialise, kBootCount)
  kPutPartition,     // partition create
  kDeletePartition,  // partition remove
  kPutFailure,       // an IPU failed (unrecoverable fault)
  kDeleteFailure,    // a failed IPU repaired
  kCleanStop,        // the clean-stop record, at an orderly shutdown
  kJobNumber,        // a job number taken (submit)
  kPutJobs,          // job records written (submit, every state change, progress)
  kDeleteJob,        // a finished job deleted
  kLedgerOpen,       // a session's usage record opened (grant)
  kLedgerClose,      // a session's usage record closed (its end)
  kLedgerPut,        // a whole usage record written (a job that ended)
  kLedgerCloseOpen,  // open usage records ended SERVER_RESTART (every start)
  kHeartbeat,        // the server's last sign of life (every start, then periodically)
  kLedgerPurge,      // usage records past retention deleted (every start, then daily)
  kAuditAppend,      // an audit record (every audited action; server.start at every start)
  kAuditPurge,       // audit records past retention or the cap deleted (every start, then
                     // every heartbeat)
};

inline constexpr WritePoint kAllWritePoints[] = {
    WritePoint::kInitialise,    WritePoint::kBootCount,       WritePoint::kMarker,
    WritePoint::kPutPartition,  WritePoint::kDeletePartition, WritePoint::kPutFailure,
    WritePoint::kDeleteFailure, WritePoint::kCleanStop,       WritePoint::kJobNumber,
    WritePoint::kPutJobs,       WritePoint::kDeleteJob,       WritePoint::kLedgerOpen,
    WritePoint::kLedgerClose,   WritePoint::kLedgerPut,       WritePoint::kLedgerCloseOpen,
    WritePoint::kHeartbeat,     WritePoint::kLedgerPurge,     WritePoint::kAuditAppend,
    WritePoint::kAuditPurge,
};

// "initialise", "boot_count", "marker", "put_partition", ...
absl::string_view WritePointName(WritePoint point);

enum class FaultAction { kCrashBeforeCommit, kCrashAfterCommit, kFail };

struct WriteFault {
  WritePoint point = WritePoint::kPutPartition;
  int nth = 1;  // the Nth write at `point`, 1-based
  FaultAction action = FaultAction::kFail;
};

inline constexpr const char* kWriteFaultEnv = "IPUPOD_TEST_STORE_FAULT";

// Parses "POINT:N:ACTION", ACTION one of crash-before, crash-after, fail.
absl::StatusOr<WriteFault> ParseWriteFault(absl::string_view spec);
// The fault IPUPOD_TEST_STORE_FAULT names, or nullopt when it is unset/empty.
absl::StatusOr<std::optional<WriteFault>> WriteFaultFromEnvironment();

// Counts writes per point and fires the fault at the chosen one.
class WriteFaultInjector {
 public:
  explicit WriteFaultInjector(std::optional<WriteFault> fault) : fault_(fault) {}

  // Just before the write at `point` commits: counts it, and for the chosen
  // write crashes (crash-before), returns UNAVAILABLE (fail), or arms the
  // crash AfterCommit fires (crash-after).
  absl::Status BeforeCommit(WritePoint point) {
    if (!fault_) return absl::OkStatus();  // the production path: one branch
    return Fire(point);
  }
  // Just after the write at `point` committed.
  void AfterCommit(WritePoint point) {
    if (armed_ && fault_ && fault_->point == point) CrashNow(point);
  }

 private:
  absl::Status Fire(WritePoint point);
  [[noreturn]] void CrashNow(WritePoint point);

  std::optional<WriteFault> fault_;
  int seen_ = 0;
  bool armed_ = false;
};

}  // namespace ipupod::store

#endif  // IPUPOD_STORE_WRITE_POINTS_H_
