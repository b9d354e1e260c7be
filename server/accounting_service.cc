// AccountingService handlers: authenticate -> scope -> read the ledger ->
// convert (server/sync_handlers.h). The sums are scheduler/accounting/usage_report.h's.
#include "server/accounting_service.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "scheduler/accounting/usage_report.h"
#include "server/sync_handlers.h"

namespace ipupod::server {
namespace {

using accounting::UsageRecord;
using scheduler::Caller;

// The user the caller's request is limited to ("" = everyone).
absl::StatusOr<std::string> ScopeUser(const Caller& caller, const std::string& asked,
                                      bool usage_public) {
  if (caller.admin || usage_public) return asked;
  if (asked.empty() || asked == caller.user) return caller.user;
  return absl::PermissionDeniedError(absl::StrCat(
      "you may see only your own usage records, not ", asked.substr(0, 64),
      "'s; leave --user out (admins see everyone's, and everyone does where the server's config "
      "sets accounting_public)"));
}

absl::Status CheckWindow(int64_t since, int64_t until) {
  if (since < 0 || until < 0) {
    return absl::InvalidArgumentError("times must not be negative (Unix milliseconds)");
  }
  if (until > 0 && since >= until) {
    return absl::InvalidArgumentError(absl::StrCat("the window is empty: since (", since,
                                                   ") is not before until (", until,
                                                   "); give --since an earlier time than --until"));
  }
  return absl::OkStatus();
}

void ToProto(const UsageRecord& r, v1::UsageRecord* out) {
  out->set_id(r.id);
  out->set_kind(std::string(accounting::RecordKindName(r.kind)));
  out->set_user(r.user);
  out->set_account(r.account);
  out->set_qos(r.qos);
  out->set_job(r.job);
  out->set_partition(r.partition);
  out->set_ipus(static_cast<uint32_t>(r.ipus));
  out->set_submit_unix_ms(r.submit_unix_ms);
  out->set_start_unix_ms(r.start_unix_ms);
  out->set_end_unix_ms(r.end_unix_ms);
  out->set_ipu_seconds(r.ipu_seconds);
  out->set_state(r.state);
}

void ToProto(const accounting::UsageRow& row, v1::UsageGroup* out) {
  out->set_key(row.key);
  out->set_ipu_seconds(row.ipu_seconds);
  out->set_job_ipu_seconds(row.job_ipu_seconds);
  out->set_sessions(static_cast<uint64_t>(row.sessions));
  out->set_jobs(static_cast<uint64_t>(row.jobs));
}

absl::Status History(accounting::Ledger& ledger, const Caller& caller, bool usage_public,
                     const v1::ListHistoryRequest& request, v1::ListHistoryResponse* response) {
  IPUPOD_RETURN_IF_ERROR(CheckWindow(request.since_unix_ms(), request.until_unix_ms()));
  if (request.limit() > AccountingServiceImpl::kMaxHistory) {
    return absl::InvalidArgumentError(absl::StrCat("a history lists at most ",
                                                   AccountingServiceImpl::kMaxHistory,
                                                   " records; ask for fewer (--limit), or narrow "
                                                   "--since/--until"));
  }
  accounting::LedgerQuery query;
  IPUPOD_ASSIGN_OR_RETURN(query.user, ScopeUser(caller, request.user(), usage_public));
  if (!request.state().empty()) {
    IPUPOD_ASSIGN_OR_RETURN(query.state, accounting::NormalizeState(request.state()));
  }
  query.since_unix_ms = request.since_unix_ms();
  query.until_unix_ms = request.until_unix_ms();
  const int limit = static_cast<int>(request.limit() == 0 ? AccountingServiceImpl::kDefaultHistory
                                                          : request.limit());
  query.limit = limit + 1;  // one more says whether there are more
  IPUPOD_ASSIGN_OR_RETURN(std::vector<UsageRecord> records, ledger.Query(query));
  const int64_t now = absl::ToUnixMillis(absl::Now());
  response->set_truncated(records.size() > static_cast<size_t>(limit));
  if (response->truncated()) records.resize(static_cast<size_t>(limit));
  for (const UsageRecord& r : records) ToProto(accounting::AsOf(r, now), response->add_records());
  response->set_server_unix_ms(now);
  return absl::OkStatus();
}

absl::Status Usage(accounting::Ledger& ledger, const Caller& caller, bool usage_public,
                   const v1::GetUsageRequest& request, v1::GetUsageResponse* response) {
  IPUPOD_RETURN_IF_ERROR(CheckWindow(request.since_unix_ms(), request.until_unix_ms()));
  IPUPOD_ASSIGN_OR_RETURN(
      const accounting::UsageGroupBy by,
      accounting::ParseUsageGroupBy(request.group_by().empty() ? "user" : request.group_by()));
  const int64_t now = absl::ToUnixMillis(absl::Now());
  const int64_t until = request.until_unix_ms() > 0 ? request.until_unix_ms() : now;
  if (request.since_unix_ms() >= until) {
    return absl::InvalidArgumentError(
        "the window is empty: --since is not before --until (default: now); give an earlier "
        "--since");
  }
  accounting::LedgerQuery query;
  IPUPOD_ASSIGN_OR_RETURN(query.user, ScopeUser(caller, request.user(), usage_public));
  query.since_unix_ms = request.since_unix_ms();
  query.until_unix_ms = until;
  query.limit = AccountingServiceImpl::kMaxUsageRecords + 1;
  accounting::UsageReport report(by, request.since_unix_ms(), until, now);
  int read = 0;
  absl::Status added;
  IPUPOD_RETURN_IF_ERROR(ledger.Scan(query, [&](const UsageRecord& r) {
    if (++read > AccountingServiceImpl::kMaxUsageRecords) return false;
    added = report.Add(r);
    return added.ok();
  }));
  IPUPOD_RETURN_IF_ERROR(added);
  if (read > AccountingServiceImpl::kMaxUsageRecords) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the window holds more than ", AccountingServiceImpl::kMaxUsageRecords,
                     " usage records, more than one report reads; narrow it (--since, --until) "
                     "or ask for one user's"));
  }
  for (const accounting::UsageRow& row : report.Rows()) ToProto(row, response->add_groups());
  ToProto(report.Total(), response->mutable_total());
  response->set_group_by(std::string(accounting::UsageGroupByName(by)));
  response->set_since_unix_ms(request.since_unix_ms());
  response->set_until_unix_ms(until);
  response->set_user(query.user);
  return absl::OkStatus();
}

}  // namespace

constexpr uint32_t AccountingServiceImpl::kDefaultHistory;
constexpr uint32_t AccountingServiceImpl::kMaxHistory;
constexpr int AccountingServiceImpl::kMaxUsageRecords;

grpc::Status AccountingServiceImpl::GetUsage(grpc::ServerContext* context,
                                             const v1::GetUsageRequest* request,
                                             v1::GetUsageResponse* response) {
  return Handle(context, env_, calls_, "GetUsage", [&](const Caller& caller) {
    return Usage(*ledger_, caller, public_, *request, response);
  });
}

grpc::Status AccountingServiceImpl::ListHistory(grpc::ServerContext* context,
                                                const v1::ListHistoryRequest* request,
                                                v1::ListHistoryResponse* response) {
  return Handle(context, env_, calls_, "ListHistory", [&](const Caller& caller) {
    return History(*ledger_, caller, public_, *request, response);
  });
}

}  // namespace ipupod::server
