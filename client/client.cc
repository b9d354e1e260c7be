#include "client/client.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/grpc_status.h"
#include "client/transport_security.h"
#include "client/unary_call.h"
#include "common/status_macros.h"
#include "common/sync.h"  // header only: absl::Mutex as TSan sees it
#include "common/user_name.h"

namespace ipupod::client {
namespace {

grpc::ChannelArguments ChannelArgs(const ClientOptions& options) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_time)));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_timeout)));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Keep pinging a held but quiet attach stream (default: 2 pings, then stop).
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  return args;
}

// Header values must be printable ASCII; gRPC would fail every call with an
// obscure INTERNAL error otherwise, so refuse up front with the fix.
bool PrintableAscii(absl::string_view text, bool allow_space) {
  for (char c : text) {
    if (c < (allow_space ? 0x20 : 0x21) || c > 0x7e) return false;
  }
  return true;
}

absl::Status CheckIdentity(const ClientOptions& options) {
  if (options.token.size() > kTokenBytesMax || !PrintableAscii(options.token, false)) {
    return absl::UnauthenticatedError(
        absl::StrCat("the token (", options.token.size(),
                     " bytes) is not a valid ipupod token: tokens are at most ", kTokenBytesMax,
                     " visible ASCII characters; check --token / IPUPOD_TOKEN"));
  }
  // The server's own rule and message: a name it would refuse is not sent.
  if (options.token.empty() && !options.user.empty() && !IsValidUserName(options.user)) {
    return absl::InvalidArgumentError(InvalidUserNameMessage(options.user));
  }
  return absl::OkStatus();
}

}  // namespace

void AddIdentity(const ClientOptions& options, grpc::ClientContext& context) {
  if (!options.token.empty()) {
    context.AddMetadata(std::string(kAuthorizationKey), absl::StrCat("Bearer ", options.token));
  } else if (!options.user.empty()) {
    context.AddMetadata(std::string(kUserKey), options.user);
  }
}

CallSite SiteOf(const ClientOptions& options, absl::string_view method, absl::Duration timeout) {
  return CallSite{options.server, method, timeout, options.tls_ca, !options.tls_cert.empty()};
}

// ---------------------------------------------------------------- Client

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (absl::Status identity = CheckIdentity(options); !identity.ok()) return identity;
  if (options.server.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no server address; pass --server HOST:PORT (default ", kDefaultServer, ")"));
  }
  if (options.rpc_timeout <= absl::ZeroDuration() ||
      options.stream_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the rpc and stream timeouts must be positive");
  }
  IPUPOD_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                          ChannelCredentialsFor(options));
  auto channel = grpc::CreateCustomChannel(options.server, credentials, ChannelArgs(options));
  return std::unique_ptr<Client>(new Client(options, std::move(channel)));
}

Client::Client(ClientOptions options, std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      channel_(std::move(channel)),
      pod_(v1::PodService::NewStub(channel_)),
      partitions_(v1::PartitionService::NewStub(channel_)),
      sessions_(v1::SessionService::NewStub(channel_)),
      execution_(v1::ExecutionService::NewStub(channel_)),
      jobs_(v1::JobService::NewStub(channel_)),
      accounting_(v1::AccountingService::NewStub(channel_)),
      audit_(v1::AuditService::NewStub(channel_)),
      compile_(v1::CompileService::NewStub(channel_)) {}

void Client::PrepareContext(grpc::ClientContext& context, absl::Duration timeout) const {
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  AddIdentity(options_, context);
}

absl::Status Client::StreamStatus(const grpc::Status& status, const grpc::ClientContext& context,
                                  absl::string_view method) const {
  if (status.ok()) return absl::OkStatus();
  return ConvertCallStatus(status, context.GetServerTrailingMetadata(),
                           SiteOf(options_, method, options_.stream_timeout));
}

// One line per RPC: the stub call inside the generic wrapper.
#define IPUPOD_CLIENT_UNARY(Stub, Method, Request, Response)                          \
  absl::StatusOr<v1::Response> Client::Method(const v1::Request& request) {           \
    return Call<v1::Response>(#Method, [&](grpc::ClientContext* c, v1::Response* r) { \
      return Stub->Method(c, request, r);                                             \
    });                                                                               \
  }

IPUPOD_CLIENT_UNARY(pod_, GetPodInfo, GetPodInfoRequest, GetPodInfoResponse)
IPUPOD_CLIENT_UNARY(pod_, InjectFault, InjectFaultRequest, InjectFaultResponse)
IPUPOD_CLIENT_UNARY(pod_, ResetIpu, ResetIpuRequest, ResetResponse)
IPUPOD_CLIENT_UNARY(pod_, ResetPod, ResetPodRequest, ResetResponse)
IPUPOD_CLIENT_UNARY(pod_, RepairIpu, RepairIpuRequest, RepairIpuResponse)
IPUPOD_CLIENT_UNARY(partitions_, CreatePartition, CreatePartitionRequest, Partition)
IPUPOD_CLIENT_UNARY(partitions_, GetPartition, GetPartitionRequest, Partition)
IPUPOD_CLIENT_UNARY(partitions_, ListPartitions, ListPartitionsRequest, ListPartitionsResponse)
IPUPOD_CLIENT_UNARY(partitions_, RemovePartition, RemovePartitionRequest, RemovePartitionResponse)
IPUPOD_CLIENT_UNARY(partitions_, ResetPartition, ResetPartitionRequest, ResetResponse)
IPUPOD_CLIENT_UNARY(sessions_, Detach, DetachRequest, DetachResponse)
IPUPOD_CLIENT_UNARY(sessions_, GetSession, GetSessionRequest, SessionInfo)
IPUPOD_CLIENT_UNARY(sessions_, ListQueue, ListQueueRequest, ListQueueResponse)
IPUPOD_CLIENT_UNARY(sessions_, GetShares, GetSharesRequest, GetSharesResponse)
IPUPOD_CLIENT_UNARY(sessions_, ResetSession, ResetSessionRequest, ResetResponse)
IPUPOD_CLIENT_UNARY(accounting_, GetUsage, GetUsageRequest, GetUsageResponse)
IPUPOD_CLIENT_UNARY(accounting_, ListHistory, ListHistoryRequest, ListHistoryResponse)
IPUPOD_CLIENT_UNARY(audit_, ListAudit, ListAuditRequest, ListAuditResponse)

#undef IPUPOD_CLIENT_UNARY

absl::StatusOr<v1::InjectFaultResponse> Client::InjectFault(uint32_t ipu, v1::FaultKind kind) {
  v1::InjectFaultRequest request;
  request.set_ipu(ipu);
  request.set_kind(kind);
  return InjectFault(request);
}

absl::StatusOr<v1::ResetResponse> Client::ResetIpu(uint32_t ipu) {
  v1::ResetIpuRequest request;
  request.set_ipu(ipu);
  return ResetIpu(request);
}

absl::StatusOr<v1::RepairIpuResponse> Client::RepairIpu(uint32_t ipu) {
  v1::RepairIpuRequest request;
  request.set_ipu(ipu);
  return RepairIpu(request);
}

absl::StatusOr<v1::Partition> Client::CreatePartition(absl::string_view name, uint32_t size) {
  v1::CreatePartitionRequest request;
  request.set_name(std::string(name));
  request.set_size(size);
  return CreatePartition(request);
}

absl::StatusOr<v1::Partition> Client::GetPartition(absl::string_view name) {
  v1::GetPartitionRequest request;
  request.set_name(std::string(name));
  return GetPartition(request);
}

absl::StatusOr<v1::RemovePartitionResponse> Client::RemovePartition(absl::string_view name,
                                                                    bool force) {
  v1::RemovePartitionRequest request;
  request.set_name(std::string(name));
  request.set_force(force);
  return RemovePartition(request);
}

absl::StatusOr<v1::ResetResponse> Client::ResetPartition(absl::string_view name) {
  v1::ResetPartitionRequest request;
  request.set_name(std::string(name));
  return ResetPartition(request);
}

absl::StatusOr<v1::DetachResponse> Client::Detach(absl::string_view session) {
  v1::DetachRequest request;
  request.set_session(std::string(session));
  return Detach(request);
}

absl::StatusOr<v1::SessionInfo> Client::GetSession(absl::string_view session) {
  v1::GetSessionRequest request;
  request.set_session(std::string(session));
  return GetSession(request);
}

absl::StatusOr<v1::ResetResponse> Client::ResetSession(absl::string_view session) {
  v1::ResetSessionRequest request;
  request.set_session(std::string(session));
  return ResetSession(request);
}

absl::StatusOr<v1::ExecutableRef> Client::StatExecutable(absl::string_view sha256) {
  v1::StatExecutableRequest request;
  request.set_sha256(std::string(sha256));
  return Call<v1::ExecutableRef>("StatExecutable",
                                 [&](grpc::ClientContext* c, v1::ExecutableRef* r) {
                                   return execution_->StatExecutable(c, request, r);
                                 });
}

absl::StatusOr<v1::LoadedProgram> Client::Load(absl::string_view session,
                                               absl::string_view sha256) {
  v1::LoadRequest request;
  request.set_session(std::string(session));
  request.set_sha256(std::string(sha256));
  return Call<v1::LoadedProgram>("Load", [&](grpc::ClientContext* c, v1::LoadedProgram* r) {
    return execution_->Load(c, request, r);
  });
}

absl::StatusOr<v1::LoadedProgram> Client::GetLoaded(absl::string_view session) {
  v1::GetLoadedRequest request;
  request.set_session(std::string(session));
  return Call<v1::LoadedProgram>("GetLoaded", [&](grpc::ClientContext* c, v1::LoadedProgram* r) {
    return execution_->GetLoaded(c, request, r);
  });
}

absl::StatusOr<v1::OptimizerInfo> Client::SetOptimizer(
    absl::string_view session, const std::map<std::string, double>& variables) {
  v1::SetOptimizerRequest request;
  request.set_session(std::string(session));
  for (const auto& [name, value] : variables) (*request.mutable_variables())[name] = value;
  return Call<v1::OptimizerInfo>("SetOptimizer", [&](grpc::ClientContext* c, v1::OptimizerInfo* r) {
    return execution_->SetOptimizer(c, request, r);
  });
}

}  // namespace ipupod::client
