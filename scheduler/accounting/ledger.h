// File: scheduler/accounting/ledger.h
//
// The usage ledger: one durable record per session and per batch job (user,
// account, QoS, IPUs, submit/start/end times, IPU-seconds, end state). The
// Scheduler opens a session's record when it grants the IPUs and closes it
// when the session ends; the JobManager puts a job's record when the job
// ends. `ipupod usage` (like sreport) and `ipupod history` (like sacct) read
// it, and the Scheduler rebuilds its decayed fair-share usage from it at
// start-up, so usage survives restarts.
//
// A kill -9 loses at most the ends of the sessions open at that moment: on
// the next start CloseOpenRecords ends them with state "SERVER_RESTART" at the
// last moment the server was known alive (never silently dropped).
//
// Implementations: store/SqliteStateStore (durable) and tests' fakes.
// Thread safety: implementations are safe to call from any thread.
// Errors: absl::Status; a failed write is logged by the caller and changes
// nothing in the ledger.
#ifndef IPUPOD_ACCOUNTING_LEDGER_H_
#define IPUPOD_ACCOUNTING_LEDGER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ipupod::accounting {

enum class RecordKind { kSession, kJob };
absl::string_view RecordKindName(RecordKind kind);  // "session", "job"

// End states of a session (a job's are its JobState names: COMPLETED, ...).
inline constexpr absl::string_view kStateRunning = "RUNNING";    // still open
inline constexpr absl::string_view kStateReleased = "RELEASED";  // its client or its user ended it
inline constexpr absl::string_view kStateDetached = "DETACHED";  // someone else: `ipupod detach`
inline constexpr absl::string_view kStatePreempted = "PREEMPTED";  // for higher priority work
inline constexpr absl::string_view kStateTimeout = "TIMEOUT";      // its time limit ran out
inline constexpr absl::string_view kStateShutdown = "SHUTDOWN";    // the server stopped
inline constexpr absl::string_view kStateServerRestart = "SERVER_RESTART";  // kill -9, crash

struct UsageRecord {
  std::string id;  // session id ("s3-7") or job id ("17", "17.3")
  RecordKind kind = RecordKind::kSession;
  std::string user;
  std::string account;
  std::string qos;
  std::string job;        // a session run for a batch job: the job's id
  std::string partition;  // "" = the free pool
  int ipus = 0;
  int64_t submit_unix_ms = 0;  // when the request was made
  int64_t start_unix_ms = 0;   // when the IPUs were granted (0: never)
  int64_t end_unix_ms = 0;     // 0 while open
  double ipu_seconds = 0;      // IPUs held x seconds held
  std::string state;           // kStateRunning while open
};

// Upper bound of LedgerQuery::limit (the scheduler reads this much at start).
inline constexpr int kMaxLedgerQueryLimit = 1000000;

struct LedgerQuery {
  int64_t since_unix_ms = 0;  // records that ended at or after (open ones always)
  // Records that started before (a job that never started: submitted
  // before); 0 = no bound.
  int64_t until_unix_ms = 0;
  std::string user;                // "" = everyone
  std::string state;               // "" = any
  std::optional<RecordKind> kind;  // nullopt = both
  int limit = 10000;               // at most this many, newest first (1..kMaxLedgerQueryLimit)
};

// A session's end: Close's arguments.
struct RecordEnd {
  std::string id;
  int64_t end_unix_ms = 0;
  double ipu_seconds = 0;
  std::string state;
};

class Ledger {
 public:
  virtual ~Ledger() = default;
  // Opens a session's record (state RUNNING, end 0).
  virtual absl::Status Open(const UsageRecord& record) = 0;
  // Closes an open record; NOT_FOUND if it is not open.
  virtual absl::Status Close(absl::string_view id, int64_t end_unix_ms, double ipu_seconds,
                             absl::string_view state) = 0;
  // Open of each record, in order, as one durable write (a busy pod ends and
  // starts sessions faster than one write each can keep up with): each
  // record's status as Open would return it, a refused record left out and
  // the others written; a failed write fails them all and changes nothing.
  // The default calls Open for each.
  virtual std::vector<absl::Status> OpenAll(const std::vector<UsageRecord>& records);
  // Close of each end, the same way.
  virtual std::vector<absl::Status> CloseAll(const std::vector<RecordEnd>& ends);
  // Writes a whole record (a job that ended), replacing one with its id.
  virtual absl::Status Put(const UsageRecord& record) = 0;
  // Newest (latest submitted) first; INVALID_ARGUMENT for a limit outside
  // 1..kMaxLedgerQueryLimit.
  virtual absl::StatusOr<std::vector<UsageRecord>> Query(const LedgerQuery& query) = 0;
  // Calls `visit` for each record Query would return, in no set order,
  // without holding them all: at most query.limit, fewer when `visit`
  // returns false. The default runs Query; a large ledger overrides it.
  virtual absl::Status Scan(const LedgerQuery& query,
                            const std::function<bool(const UsageRecord&)>& visit);
  // At start-up: closes every open record as SERVER_RESTART, ending at
  // `end_unix_ms` (the last moment the previous server was known alive).
  // Returns how many it closed.
  virtual absl::StatusOr<int> CloseOpenRecords(int64_t end_unix_ms) = 0;
};

}  // namespace ipupod::accounting

#endif  // IPUPOD_ACCOUNTING_LEDGER_H_
