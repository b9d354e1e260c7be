// File: server/audit_service.h
//
// AuditServiceImpl: ipupod.v1.AuditService (proto/ipupod/v1/audit.proto) on
// gRPC's synchronous thread pool, beside AccountingService: a page of the
// audit log is an SQLite query on the store's reading connection, which
// must not run on the callback threads. The handler authenticates, refuses
// anyone but an admin (PERMISSION_DENIED, saying so), converts the request
// into an audit::AuditQuery (checked by audit::CheckQuery) and the page
// back; the page token is the seq of the page's last record.
//
// Bounds: calls server-wide and per user (server/call_limit.h); a page holds
// at most audit::kMaxQueryLimit records.
//
// Thread safety: handlers run concurrently; the env and the log outlive the
// service.
#ifndef IPUPOD_SERVER_AUDIT_SERVICE_H_
#define IPUPOD_SERVER_AUDIT_SERVICE_H_

#include <cstdint>

#include <grpcpp/server_context.h>

#include "ipupod/v1/audit.grpc.pb.h"
#include "scheduler/audit/audit_log.h"
#include "server/call_limit.h"
#include "server/service_env.h"

namespace ipupod::server {

class AuditServiceImpl final : public v1::AuditService::Service {
 public:
  static constexpr uint32_t kDefaultLimit = 100;

  AuditServiceImpl(const ServiceEnv& env, audit::AuditLog* log, int max_calls,
                   int max_calls_per_user)
      : env_(env),
        log_(log),
        calls_(max_calls, max_calls_per_user,
               {.calls = "audit listings",
                .examples = "ipupod audit; ",
                .bound = "ipupodd config audit_max_calls",
                .per_user_bound = "ipupodd config audit_max_calls_per_user",
                .per_user_hint = "a listing ends when its page is sent"}) {}

  grpc::Status ListAudit(grpc::ServerContext* context, const v1::ListAuditRequest* request,
                         v1::ListAuditResponse* response) override;

 private:
  const ServiceEnv& env_;
  audit::AuditLog* const log_;
  CallLimit calls_;
};

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_AUDIT_SERVICE_H_
