#include "absl/strings/str_cat.h"
#include "scheduler/audit/audit_log.h"
#include "server/audit_trail.h"
#include "server/proto_convert.h"
#include "server/services.h"

namespace ipupod::server {

using scheduler::Caller;

grpc::ServerUnaryReactor* PartitionServiceImpl::CreatePartition(
    grpc::CallbackServerContext* context, const v1::CreatePartitionRequest* request,
    v1::Partition* response) {
  return HandleUnary(context, env_, "CreatePartition", [&](const Caller& caller) {
    absl::StatusOr<scheduler::PartitionView> view =
        env_.scheduler->CreatePartition(caller, request->name(), request->size());
    if (view.ok()) ToProto(*view, response);
    return view.status();
  });
}

grpc::ServerUnaryReactor* PartitionServiceImpl::GetPartition(grpc::CallbackServerContext* context,
                                                             const v1::GetPartitionRequest* request,
                                                             v1::Partition* response) {
  return HandleUnary(context, env_, "GetPartition", [&](const Caller&) {
    absl::StatusOr<scheduler::PartitionView> view = env_.scheduler->GetPartition(request->name());
    if (view.ok()) ToProto(*view, response);
    return view.status();
  });
}

grpc::ServerUnaryReactor* PartitionServiceImpl::ListPartitions(
    grpc::CallbackServerContext* context, const v1::ListPartitionsRequest* /*request*/,
    v1::ListPartitionsResponse* response) {
  return HandleUnary(context, env_, "ListPartitions", [&](const Caller&) {
    for (const auto& view : env_.scheduler->ListPartitions()) {
      ToProto(view, response->add_partitions());
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* PartitionServiceImpl::RemovePartition(
    grpc::CallbackServerContext* context, const v1::RemovePartitionRequest* request,
    v1::RemovePartitionResponse* response) {
  return HandleUnary(context, env_, "RemovePartition", [&](const Caller& caller) {
    absl::StatusOr<std::vector<std::string>> detached =
        env_.scheduler->RemovePartition(caller, request->name(), request->force());
    if (detached.ok()) {
      for (const std::string& session : *detached) response->add_detached_sessions(session);
    }
    if (request->force()) {  // a plain remove ends nobody's work: not audited
      AuditAction(env_, *context, caller, audit::kPartitionRemoveForce,
                  NamedTarget("partition", request->name()),
                  detached.ok() ? absl::StrCat("detached=", SessionList(*detached)) : "",
                  detached.status());
    }
    return detached.status();
  });
}

grpc::ServerUnaryReactor* PartitionServiceImpl::ResetPartition(
    grpc::CallbackServerContext* context, const v1::ResetPartitionRequest* request,
    v1::ResetResponse* response) {
  std::string name = request->name();
  return HandleUnaryAsync<scheduler::ResetResult>(
      context, env_, "ResetPartition", response,
      [&](const Caller& caller, scheduler::ResetDone done) {
        env_.scheduler->ResetPartition(
            caller, name,
            AuditedReset(env_, *context, caller, audit::kPartitionReset,
                         NamedTarget("partition", name), std::move(done)));
      });
}

}  // namespace ipupod::server
