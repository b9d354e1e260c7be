// File: server/audit_trail.h
//
// Where the server writes its audit log (audit/audit_log.h). AuditTrail
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

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "audit/audit_log.h"
#include "scheduler/scheduler.h"
#include "server/service_env.h"

namespace ipupod::server {

class AuditTrail {
 public:
  // `clock` empty: absl::Now.
  explicit AuditTrail(audit::AuditLog* log, std::function<absl::Time()> clock = {});
  AuditTrail(const AuditTrail&) = delete;
  AuditTrail& operator=(const AuditTrail&) = delete;

  // Stamps (time), bounds and appends `record`. The append's status is
  // returned for tests; callers need not look at it (a failure is logged
  // and counted here).
  absl::Status Record(audit::AuditRecord record);

  uint64_t written() const { return written_.load(); }
  uint64_t failed_writes() const { return failed_.load(); }

 private:
  audit::AuditLog* const log_;
  const std::function<absl::Time()> clock_;
  std::atomic<uint64_t> written_{0};
  std::atomic<uint64_t> failed_{0};
};

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
