// File: server/accounting_service.h
//
// AccountingServiceImpl: ipupod.v1.AccountingService
// (proto/ipupod/v1/accounting.proto) on gRPC's synchronous thread pool: the
// ledger's reads are SQLite queries (on the store's reading connection),
// which must not run on the callback threads. Each handler authenticates,
// scopes the request to what the caller may see, reads the ledger and
// converts (scheduler/accounting/usage_report.h does the sums).
//
// Visibility: admins see everyone's records; others only their own unless
// `usage_public` (config accounting_public).
// Bounds: calls server-wide and per user (server/call_limit.h); a history
// answers at most kMaxHistory records; a usage report reads at most
// kMaxUsageRecords records (RESOURCE_EXHAUSTED beyond, saying to narrow the
// window) and makes at most accounting::kMaxUsageGroups groups.
//
// Thread safety: handlers run concurrently; the env and the ledger outlive
// the service.
#ifndef IPUPOD_SERVER_ACCOUNTING_SERVICE_H_
#define IPUPOD_SERVER_ACCOUNTING_SERVICE_H_

#include <grpcpp/server_context.h>

#include "ipupod/v1/accounting.grpc.pb.h"
#include "scheduler/accounting/ledger.h"
#include "server/call_limit.h"
#include "server/service_env.h"

namespace ipupod::server {

class AccountingServiceImpl final : public v1::AccountingService::Service {
 public:
  static constexpr uint32_t kDefaultHistory = 100;
  static constexpr uint32_t kMaxHistory = 10000;
  // One below the ledger's query limit: the report asks for one more to
  // know it was not all.
  static constexpr int kMaxUsageRecords = accounting::kMaxLedgerQueryLimit - 1;

  AccountingServiceImpl(const ServiceEnv& env, accounting::Ledger* ledger, bool usage_public,
                        int max_calls, int max_calls_per_user)
      : env_(env),
        ledger_(ledger),
        public_(usage_public),
        calls_(max_calls, max_calls_per_user,
               {.calls = "usage queries",
                .examples = "ipupod usage, history; ",
                .bound = "ipupodd config accounting_max_calls",
                .per_user_bound = "ipupodd config accounting_max_calls_per_user",
                .per_user_hint = "a query ends when its answer is sent"}) {}

  grpc::Status GetUsage(grpc::ServerContext* context, const v1::GetUsageRequest* request,
                        v1::GetUsageResponse* response) override;
  grpc::Status ListHistory(grpc::ServerContext* context, const v1::ListHistoryRequest* request,
                           v1::ListHistoryResponse* response) override;

 private:
  const ServiceEnv& env_;
  accounting::Ledger* const ledger_;
  const bool public_;
  CallLimit calls_;
};

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_ACCOUNTING_SERVICE_H_
