// File: server/audit_trail.h
//
// Where the server writes its audit log (scheduler/audit/audit_log.h). AuditTrail
// stamps a record with the time, bounds it (audit::Bounded) and appends it
// to the store before the action's answer is sent; the helpers below make
// each call site one line:
//
//   AuditAction(env_, *context, caller, audit::kFaultInject, IpuTarget(ipu),
//               details, status);                         // a unary handler
//   done = AuditedReset(env_, *context, caller, audit::kIpuReset,
//                       IpuTarget(ipu), std::move(done)); // a reset: recorded
//                                                         // when it completes
//
// A record names the caller (user, admin or not), gRPC's peer address, the
// action, its target and details, and the result (code name and message).
// An asynchronous reset is recorded once, when it completes (or is
// refused): the record carries its result, and the answer waits for the
// record like every other action's (docs/design.md, "The audit log").
//
// Refusals are summarised: a refused call by a non-admin (the caller not an
// admin, the code not OK) is recorded when it is the first of its (user,
// action, code) in a window of `refusal_window`; the others in that window
// are only counted, and when the window has ended one summary record says
// how many (details "refused=N first_unix_ms=... last_unix_ms=..."; the
// last refusal's peer, target and details). So one user refusing in a loop
// writes at most two records per action and code per window, whatever the
// rate. Ended windows are summarised at the next Record, at FlushRefusals
// (ListAudit calls it: an admin reads the counts so far) and at Stop, which
// summarises the open windows too (the server's stop). At most
// kRefusalWindowsMax windows are open; a new one past that ends the oldest
// early. The store's cap evicts these records before any other
// (server/store/sqlite_audit.h), so they never push out what admins wrote.
//
// A failed append does not fail the action, which has happened already
// (a fault injected, IPUs reset): answering an error would make the client
// believe it had not, and retry it. It is logged at error level with the
// whole record, so the log keeps what the table lost, and counted
// (failed_writes(), for metrics and tests).
//
// Thread safety: Record and the helpers are safe from any thread; the log
// outlives the trail, and the trail every RPC (PodServer's member order).
#ifndef IPUPOD_SERVER_AUDIT_TRAIL_H_
#define IPUPOD_SERVER_AUDIT_TRAIL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <grpcpp/server_context.h>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "scheduler/audit/audit_log.h"
#include "scheduler/scheduler.h"
#include "server/service_env.h"

namespace ipupod::server {

class AuditTrail {
 public:
  static constexpr size_t kRefusalWindowsMax = 4096;

  // `clock` empty: absl::Now. `refusal_window` > 0 (config
  // audit_refusal_window_seconds).
  explicit AuditTrail(audit::AuditLog* log, std::function<absl::Time()> clock = {},
                      absl::Duration refusal_window = absl::Seconds(60));
  AuditTrail(const AuditTrail&) = delete;
  AuditTrail& operator=(const AuditTrail&) = delete;

  // Stamps (time), bounds and appends `record`, or counts it when it is a
  // refusal repeated within its window. The append's status is returned for
  // tests; callers need not look at it (a failure is logged and counted
  // here).
  absl::Status Record(audit::AuditRecord record);
  // Writes the summaries of the refusal windows that have ended.
  void FlushRefusals();
  // Writes the summaries of every refusal window, ended or not.
  void Stop();

  uint64_t written() const { return written_.load(); }
  uint64_t failed_writes() const { return failed_.load(); }
  // Refusals counted into a summary rather than written one by one.
  uint64_t summarised() const { return summarised_.load(); }

 private:
  // The refusals of one (user, action, code) since `start`, after the one
  // that was written: `count` of them, the last one's record kept.
  struct Window {
    absl::Time start;
    int64_t count = 0;
    audit::AuditRecord last;
  };
  // True when `record` was counted into an open window (nothing to write);
  // adds to `due` the summaries of windows that ended.
  bool CountRefusal(const audit::AuditRecord& record, absl::Time now,
                    std::vector<audit::AuditRecord>& due);
  // The record that stands for `window`'s counted refusals: the last one's
  // fields, with the count and the times in details.
  static audit::AuditRecord Summary(const Window& window);
  // Moves the summaries of windows ended at `now` (all when `all`) to `due`.
  void TakeEndedLocked(absl::Time now, bool all, std::vector<audit::AuditRecord>& due)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Append(audit::AuditRecord record);

  audit::AuditLog* const log_;
  const std::function<absl::Time()> clock_;
  const absl::Duration refusal_window_;
  absl::Mutex mu_;  // a leaf: appends happen outside it
  absl::flat_hash_map<std::string, Window> windows_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> written_{0};
  std::atomic<uint64_t> failed_{0};
  std::atomic<uint64_t> summarised_{0};
};

// A refused call by a non-admin: what AuditTrail summarises and the store's
// cap evicts first.
bool IsRefusal(const audit::AuditRecord& record);

// Records `action` by `caller` on `target` with its result `status`.
// Nothing when env.audit is null (tests that build an env by hand).
void AuditAction(const ServiceEnv& env, const grpc::ServerContextBase& context,
                 const scheduler::Caller& caller, absl::string_view action,
                 absl::string_view target, absl::string_view details, const absl::Status& status);

// `done`, preceded by the record of the reset's result: its reset IPUs and
// affected sessions as details.
scheduler::ResetDone AuditedReset(const ServiceEnv& env, const grpc::ServerContextBase& context,
                                  const scheduler::Caller& caller, absl::string_view action,
                                  std::string target, scheduler::ResetDone done);

// The pieces of targets and details: "ipu 4", "partition exp1",
// "session s1-3", "job 17"; IPU lists as ranges ("0-3,8"), session lists
// joined by commas.
std::string IpuTarget(int64_t ipu);
std::string NamedTarget(absl::string_view kind, absl::string_view name);
std::string IpuList(std::vector<int> ipus);
std::string SessionList(const std::vector<std::string>& sessions);

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_AUDIT_TRAIL_H_
