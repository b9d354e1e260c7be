// File: scheduler/audit/audit_log.h
//
// The audit log: an append-only record of every privileged or destructive
// action on the pod, allowed or refused (fault injection, resets, repairs,
// forced partition removals, detaching or cancelling someone else's
// session or job, config reloads) and of the server's own start and stop.
// Who (user, admin or not, the peer address), what (an action of the fixed
// list below), when (UTC, ms), the target, details, and the result (the
// gRPC code name; the message when not OK). `ipupod audit` reads it
// (admins only); docs/operations.md, "Audit log".
//
// The interface belongs here; store/SqliteStateStore implements it in the
// state database (schema versions 4 and 5), where triggers refuse every
// UPDATE and every DELETE but the retention purge's. There is no update
// method. Records of refused calls by non-admins are a retention class of
// their own: the cap evicts them first, so no user can push out what
// admins and privileged actions wrote (server/store/sqlite_audit.h), and
// server/audit_trail.h summarises a user's repeated refusals.
//
// Bounds: every text field of a record is cut to its bound (Bounded: user,
// peer and code 128 bytes, target 256, details and message 512) and made
// valid UTF-8, so a refused request in a loop costs a bounded row each; a
// query answers at most kMaxQueryLimit records per page.
//
// Thread safety: implementations are safe to call from any thread; the
// free functions are pure.
// Errors: Append and Query return INVALID_ARGUMENT for what CheckRecord /
// CheckQuery refuse, and the store's errors (UNAVAILABLE, RESOURCE_EXHAUSTED,
// DATA_LOSS, ...) otherwise; a failed Append changes nothing.
#ifndef IPUPOD_AUDIT_AUDIT_LOG_H_
#define IPUPOD_AUDIT_AUDIT_LOG_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ipupod::audit {

// ---- The actions recorded (the fixed list; docs/operations.md).
inline constexpr absl::string_view kFaultInject = "fault.inject";
inline constexpr absl::string_view kIpuReset = "ipu.reset";
inline constexpr absl::string_view kPartitionReset = "partition.reset";
inline constexpr absl::string_view kSessionReset = "session.reset";
inline constexpr absl::string_view kPodReset = "pod.reset";
inline constexpr absl::string_view kIpuRepair = "ipu.repair";
inline constexpr absl::string_view kPartitionRemoveForce = "partition.remove.force";
inline constexpr absl::string_view kSessionDetachOther = "session.detach.other";
inline constexpr absl::string_view kJobCancelOther = "job.cancel.other";
inline constexpr absl::string_view kConfigReload = "config.reload";
inline constexpr absl::string_view kServerStart = "server.start";
inline constexpr absl::string_view kServerStop = "server.stop";

// Every action above, in that order.
absl::Span<const absl::string_view> Actions();
bool IsAction(absl::string_view action);
// OK, or INVALID_ARGUMENT naming the actions (and the closest one).
absl::Status CheckAction(absl::string_view action);

// Who a record names when the server acted on its own (start, stop).
inline constexpr absl::string_view kServerUser = "ipupodd";
// Who a record names for a reload the SIGHUP signal asked for.
inline constexpr absl::string_view kSighupUser = "SIGHUP";

struct AuditRecord {
  int64_t seq = 0;           // set by Append: 1, 2, ... never reused
  int64_t time_unix_ms = 0;  // when the action's result was known (UTC)
  std::string user;          // the caller; kServerUser / kSighupUser for the server itself
  bool admin = false;        // the caller's rights when it acted
  std::string peer;          // gRPC's peer ("ipv4:127.0.0.1:53122"); "" for the server itself
  std::string action;        // one of Actions()
  std::string target;        // "ipu 4", "partition exp1", "session s1-3", "job 17", "pod", ...
  std::string details;       // "kind=partition-reset ipus=4-7 sessions=s1-3"
  std::string code;          // "OK", "PERMISSION_DENIED", ... (absl::StatusCodeToString)
  std::string message;       // the error's message; "" when OK
};

// Field bounds in bytes (Bounded cuts longer text, marking the cut "...").
inline constexpr size_t kNameBytesMax = 128;    // user, peer, code
inline constexpr size_t kTargetBytesMax = 256;  // target
inline constexpr size_t kTextBytesMax = 512;    // details, message

// `record` with every text field valid UTF-8 and within its bound.
AuditRecord Bounded(AuditRecord record);

// What Append accepts: a known action, a time >= 0, a code, and fields
// within their bounds (Bounded makes them so).
absl::Status CheckRecord(const AuditRecord& record);

// A record for `action` whose result is `status`: code and message from it.
void SetResult(AuditRecord& record, const absl::Status& status);

// Records per page at most.
inline constexpr int kMaxQueryLimit = 1000;

struct AuditQuery {
  int64_t since_unix_ms = 0;  // records at or after; 0 = from the first
  int64_t until_unix_ms = 0;  // records before; 0 = no bound
  std::string user;           // "" = everyone's
  std::string action;         // "" = every action
  int64_t after_seq = 0;      // the page token: only records with a larger seq
  int limit = 100;            // 1..kMaxQueryLimit
};

// A query's answer, oldest first (by seq). `next_after_seq` > 0 when more
// records may match: the next page's after_seq.
struct AuditPage {
  std::vector<AuditRecord> records;
  int64_t next_after_seq = 0;
};

// INVALID_ARGUMENT for negative times, an empty window, an unknown action,
// a negative page token or a limit outside 1..kMaxQueryLimit.
absl::Status CheckQuery(const AuditQuery& query);

class AuditLog {
 public:
  virtual ~AuditLog() = default;
  // Appends `record` (its seq ignored) durably; returns the seq it got.
  virtual absl::StatusOr<int64_t> Append(const AuditRecord& record) = 0;
  // The records matching `query`, oldest first, at most query.limit.
  virtual absl::StatusOr<AuditPage> Query(const AuditQuery& query) = 0;
};

}  // namespace ipupod::audit

#endif  // IPUPOD_AUDIT_AUDIT_LOG_H_
