// AuditService's handler: authenticate -> admins only -> query -> convert
// (server/sync_handlers.h). The rules of a query are audit::CheckQuery's.
#include "server/audit_service.h"

#include <algorithm>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "server/audit_trail.h"
#include "server/sync_handlers.h"

namespace ipupod::server {
namespace {

using scheduler::Caller;

absl::StatusOr<int64_t> ParsePageToken(const std::string& token) {
  if (token.empty()) return 0;
  int64_t seq = 0;
  const bool digits = std::all_of(token.begin(), token.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c));
  });
  if (!digits || token[0] == '0' || !absl::SimpleAtoi(token, &seq) || seq < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("page token '", CutUtf8(token, 40),
                     "' is not one this server gave; leave it empty for the first page"));
  }
  return seq;
}

void ToProto(const audit::AuditRecord& r, v1::AuditRecord* out) {
  out->set_seq(r.seq);
  out->set_time_unix_ms(r.time_unix_ms);
  out->set_user(r.user);
  out->set_admin(r.admin);
  out->set_peer(r.peer);
  out->set_action(r.action);
  out->set_target(r.target);
  out->set_details(r.details);
  out->set_code(r.code);
  out->set_message(r.message);
}

absl::Status List(audit::AuditLog& log, const Caller& caller, const v1::ListAuditRequest& request,
                  v1::ListAuditResponse* response) {
  if (!caller.admin) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the audit log is for admins only, and ", caller.user,
        " is not one; ask an admin (a token with role \"admin\", or in open mode a user named in "
        "open_mode_admins)"));
  }
  audit::AuditQuery query;
  query.since_unix_ms = request.since_unix_ms();
  query.until_unix_ms = request.until_unix_ms();
  query.user = request.user();
  query.action = request.action();
  if (request.limit() > static_cast<uint32_t>(audit::kMaxQueryLimit)) {
    return absl::InvalidArgumentError(absl::StrCat("a page holds at most ", audit::kMaxQueryLimit,
                                                   " audit records, not ", request.limit(),
                                                   "; follow next_page_token for more"));
  }
  query.limit =
      static_cast<int>(request.limit() == 0 ? AuditServiceImpl::kDefaultLimit : request.limit());
  IPUPOD_ASSIGN_OR_RETURN(query.after_seq, ParsePageToken(request.page_token()));
  IPUPOD_ASSIGN_OR_RETURN(const audit::AuditPage page, log.Query(query));
  for (const audit::AuditRecord& r : page.records) ToProto(r, response->add_records());
  if (page.next_after_seq > 0) response->set_next_page_token(absl::StrCat(page.next_after_seq));
  return absl::OkStatus();
}

}  // namespace

constexpr uint32_t AuditServiceImpl::kDefaultLimit;

grpc::Status AuditServiceImpl::ListAudit(grpc::ServerContext* context,
                                         const v1::ListAuditRequest* request,
                                         v1::ListAuditResponse* response) {
  return Handle(context, env_, calls_, "ListAudit", [&](const Caller& caller) {
    // The counts of refusal windows that have ended, before they are read.
    if (caller.admin && env_.audit != nullptr) env_.audit->FlushRefusals();
    return List(*log_, caller, *request, response);
  });
}

}  // namespace ipupod::server
