#include <algorithm>

#include "absl/strings/str_cat.h"
#include "scheduler/audit/audit_log.h"
#include "server/attach_stream.h"
#include "server/audit_trail.h"
#include "server/proto_convert.h"
#include "server/services.h"

namespace ipupod::server {

using scheduler::Caller;

namespace {

// The user holding `session`; "" when there is no such session.
std::string SessionOwner(const scheduler::Scheduler& scheduler, absl::string_view session) {
  for (const scheduler::SessionView& view : scheduler.GetPod().sessions) {
    if (view.id == session) return view.user;
  }
  return "";
}

}  // namespace

grpc::ServerWriteReactor<v1::AttachEvent>* SessionServiceImpl::Attach(
    grpc::CallbackServerContext* context, const v1::AttachRequest* request) {
  return AttachStream::Start(context, *request, env_);
}

grpc::ServerBidiReactor<v1::AttachRequest, v1::AttachEvent>* SessionServiceImpl::Hold(
    grpc::CallbackServerContext* context) {
  return HoldStream::Start(context, env_);
}

grpc::ServerUnaryReactor* SessionServiceImpl::Detach(grpc::CallbackServerContext* context,
                                                     const v1::DetachRequest* request,
                                                     v1::DetachResponse* response) {
  return HandleUnary(context, env_, "Detach", [&](const Caller& caller) {
    // Whose session it is, to tell a holder's own detach (the end of every
    // `ipupod attach -- COMMAND`) from someone else's, which is audited.
    const std::string owner = SessionOwner(*env_.scheduler, request->session());
    absl::StatusOr<std::vector<int>> released = env_.scheduler->Detach(caller, request->session());
    if (released.ok()) {
      for (int ipu : *released) response->add_released_ipus(static_cast<uint32_t>(ipu));
    }
    if (!owner.empty() && owner != caller.user) {
      AuditAction(env_, *context, caller, audit::kSessionDetachOther,
                  NamedTarget("session", request->session()),
                  absl::StrCat("owner=", owner,
                               released.ok() ? absl::StrCat(" ipus=", IpuList(*released)) : ""),
                  released.status());
    }
    return released.status();
  });
}

grpc::ServerUnaryReactor* SessionServiceImpl::GetSession(grpc::CallbackServerContext* context,
                                                         const v1::GetSessionRequest* request,
                                                         v1::SessionInfo* response) {
  return HandleUnary(context, env_, "GetSession", [&](const Caller& caller) {
    absl::StatusOr<scheduler::SessionView> view =
        env_.scheduler->GetSession(caller, request->session());
    if (view.ok()) ToProto(*view, response);
    return view.status();
  });
}

grpc::ServerUnaryReactor* SessionServiceImpl::ListQueue(grpc::CallbackServerContext* context,
                                                        const v1::ListQueueRequest* request,
                                                        v1::ListQueueResponse* response) {
  return HandleUnary(context, env_, "ListQueue", [&](const Caller& caller) {
    int total = 0;
    std::vector<scheduler::QueueEntryView> queue =
        env_.scheduler->ListQueue(request->limit(), &total);
    scheduler::HideClientLabels(caller, queue);
    response->mutable_entries()->Reserve(static_cast<int>(queue.size()));
    for (const auto& entry : queue) ToProto(entry, response->add_entries());
    response->set_total(static_cast<uint32_t>(total));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* SessionServiceImpl::GetShares(grpc::CallbackServerContext* context,
                                                        const v1::GetSharesRequest* /*request*/,
                                                        v1::GetSharesResponse* response) {
  return HandleUnary(context, env_, "GetShares", [&](const Caller& caller) {
    // Usage is private unless accounting_public, as sshare under Slurm's
    // PrivateData=usage: a user sees the accounts they belong to, admins all.
    const bool everyone = caller.admin || env_.usage_public;
    for (const auto& share : env_.scheduler->GetShares()) {
      const bool member =
          std::find(share.users.begin(), share.users.end(), caller.user) != share.users.end();
      if (!everyone && !member) continue;
      ToProto(share, response->add_accounts());
    }
    const std::shared_ptr<const sharing::SharingPolicy> policy = env_.scheduler->policy();
    response->set_order(std::string(sharing::QueueOrderName(policy->order)));
    response->set_usage_half_life_hours(absl::ToDoubleHours(policy->usage_half_life));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* SessionServiceImpl::ResetSession(grpc::CallbackServerContext* context,
                                                           const v1::ResetSessionRequest* request,
                                                           v1::ResetResponse* response) {
  std::string session = request->session();
  return HandleUnaryAsync<scheduler::ResetResult>(
      context, env_, "ResetSession", response,
      [&](const Caller& caller, scheduler::ResetDone done) {
        env_.scheduler->ResetSession(
            caller, session,
            AuditedReset(env_, *context, caller, audit::kSessionReset,
                         NamedTarget("session", session), std::move(done)));
      });
}

}  // namespace ipupod::server
