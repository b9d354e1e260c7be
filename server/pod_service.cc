#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "scheduler/audit/audit_log.h"
#include "server/audit_trail.h"
#include "server/proto_convert.h"
#include "server/services.h"

namespace ipupod::server {
namespace {

using scheduler::Caller;

// IPU ids travel as uint32; the scheduler takes int and checks the range.
absl::StatusOr<int> IpuId(uint32_t ipu) {
  if (ipu > static_cast<uint32_t>(std::numeric_limits<int>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("IPU ", ipu, " does not exist"));
  }
  return static_cast<int>(ipu);
}

// "kind=partition-reset" (the CLI's name), "kind=99" for a kind ipupod lacks.
std::string FaultKindDetail(v1::FaultKind kind) {
  std::string name = v1::FaultKind_Name(kind);
  if (!absl::StartsWith(name, "FAULT_KIND_")) return absl::StrCat("kind=", static_cast<int>(kind));
  name = absl::StrReplaceAll(absl::AsciiStrToLower(name.substr(11)), {{"_", "-"}});
  return absl::StrCat("kind=", name);
}

}  // namespace

grpc::ServerUnaryReactor* PodServiceImpl::GetPodInfo(grpc::CallbackServerContext* context,
                                                     const v1::GetPodInfoRequest* /*request*/,
                                                     v1::GetPodInfoResponse* response) {
  return HandleUnary(context, env_, "GetPodInfo", [&](const Caller& caller) {
    scheduler::PodView pod = env_.scheduler->GetPod();
    scheduler::HideClientLabels(caller, pod);
    ToProto(pod, *env_.pod.ipu, env_.auth.open_mode(), response);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* PodServiceImpl::InjectFault(grpc::CallbackServerContext* context,
                                                      const v1::InjectFaultRequest* request,
                                                      v1::InjectFaultResponse* response) {
  return HandleUnary(context, env_, "InjectFault", [&](const Caller& caller) -> absl::Status {
    absl::StatusOr<scheduler::FaultResult> result =
        [&]() -> absl::StatusOr<scheduler::FaultResult> {
      absl::StatusOr<int> ipu = IpuId(request->ipu());
      if (!ipu.ok()) return ipu.status();
      absl::StatusOr<scheduler::FaultKind> kind = FromProto(request->kind());
      if (!kind.ok()) return kind.status();
      return env_.scheduler->InjectFault(caller, *ipu, *kind);
    }();
    std::string details = FaultKindDetail(request->kind());
    if (result.ok()) {
      ToProto(*result, response);
      absl::StrAppend(&details, " ipus=", IpuList(result->affected_ipus),
                      " sessions=", SessionList(result->affected_sessions));
    }
    AuditAction(env_, *context, caller, audit::kFaultInject, IpuTarget(request->ipu()), details,
                result.status());
    return result.status();
  });
}

grpc::ServerUnaryReactor* PodServiceImpl::ResetIpu(grpc::CallbackServerContext* context,
                                                   const v1::ResetIpuRequest* request,
                                                   v1::ResetResponse* response) {
  uint32_t ipu = request->ipu();
  return HandleUnaryAsync<scheduler::ResetResult>(
      context, env_, "ResetIpu", response, [&](const Caller& caller, scheduler::ResetDone done) {
        done =
            AuditedReset(env_, *context, caller, audit::kIpuReset, IpuTarget(ipu), std::move(done));
        absl::StatusOr<int> id = IpuId(ipu);
        if (!id.ok()) return done(id.status());
        env_.scheduler->ResetIpu(caller, *id, std::move(done));
      });
}

grpc::ServerUnaryReactor* PodServiceImpl::ResetPod(grpc::CallbackServerContext* context,
                                                   const v1::ResetPodRequest* /*request*/,
                                                   v1::ResetResponse* response) {
  return HandleUnaryAsync<scheduler::ResetResult>(
      context, env_, "ResetPod", response, [&](const Caller& caller, scheduler::ResetDone done) {
        env_.scheduler->ResetPod(
            caller, AuditedReset(env_, *context, caller, audit::kPodReset, "pod", std::move(done)));
      });
}

grpc::ServerUnaryReactor* PodServiceImpl::RepairIpu(grpc::CallbackServerContext* context,
                                                    const v1::RepairIpuRequest* request,
                                                    v1::RepairIpuResponse* response) {
  return HandleUnary(context, env_, "RepairIpu", [&](const Caller& caller) -> absl::Status {
    absl::StatusOr<int> ipu = IpuId(request->ipu());
    absl::StatusOr<scheduler::IpuView> view =
        ipu.ok() ? env_.scheduler->RepairIpu(caller, *ipu) : ipu.status();
    if (view.ok()) ToProto(*view, response->mutable_ipu());
    AuditAction(env_, *context, caller, audit::kIpuRepair, IpuTarget(request->ipu()), "",
                view.status());
    return view.status();
  });
}

}  // namespace ipupod::server
