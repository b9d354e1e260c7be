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

constexpr size_t kQueuedEventsMax = 64;
// How long Release() and the destructor wait for the reader thread after
// cancelling; cancellation is local, so this is only a guard.
constexpr absl::Duration kReaderStopWait = absl::Seconds(5);

void AddIdentity(const ClientOptions& options, grpc::ClientContext& context) {
  if (!options.token.empty()) {
    context.AddMetadata(std::string(kAuthorizationKey), absl::StrCat("Bearer ", options.token));
  } else if (!options.user.empty()) {
    context.AddMetadata(std::string(kUserKey), options.user);
  }
}

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

std::unique_ptr<AttachCall> Client::StartAttach(const v1::AttachRequest& request) {
  return std::unique_ptr<AttachCall>(new AttachCall(options_, sessions_, request));
}

// ---------------------------------------------------------------- AttachCall

AttachCall::AttachCall(ClientOptions options, std::shared_ptr<v1::SessionService::Stub> stub,
                       v1::AttachRequest request)
    : options_(std::move(options)), stub_(std::move(stub)), request_(std::move(request)) {
  AddIdentity(options_, context_);
  reader_ = std::thread([this] { ReadLoop(); });
}

AttachCall::~AttachCall() {
  Cancel();
  if (reader_.joinable()) reader_.join();
}

void AttachCall::ReadLoop() {
  // Creating the reader sends the request; with the context already
  // cancelled (Cancel() before this line) the call fails at once.
  std::unique_ptr<grpc::ClientReader<v1::AttachEvent>> reader = stub_->Attach(&context_, request_);
  v1::AttachEvent event;
  while (reader->Read(&event)) {
    sync::MutexLock lock(&mu_);
    if (event.has_queued()) {
      if (queued_.size() == kQueuedEventsMax) queued_.pop_front();
      last_ticket_ = event.queued().ticket();
      queued_.push_back(event.queued());
    } else if (event.has_granted() && !granted_) {
      granted_ = event.granted();
    } else if (event.has_preempted()) {
      preempted_ = event.preempted();
    } else {
      continue;  // heartbeats only prove the session is alive
    }
    changed_.SignalAll();
  }
  grpc::Status status = reader->Finish();
  sync::MutexLock lock(&mu_);
  end_status_ = EndStatus(status);
  ended_ = true;
  changed_.SignalAll();
}

absl::Status AttachCall::EndStatus(const grpc::Status& status) {
  if (cancelled_) {
    if (granted_) {
      return absl::CancelledError(
          absl::StrCat("session ", granted_->session(), " released by this client"));
    }
    return absl::CancelledError("attach cancelled; the request left the queue");
  }
  const GrpcMetadata& trailers = context_.GetServerTrailingMetadata();
  return granted_ ? EndAfterGrant(status, trailers, granted_->session())
                  : EndBeforeGrant(status, trailers);
}

absl::Status AttachCall::EndAfterGrant(const grpc::Status& status, const GrpcMetadata& trailers,
                                       absl::string_view session) const {
  if (status.ok()) {
    return absl::AbortedError(
        absl::StrCat("session ", session, " ended: ipupodd closed its stream"));
  }
  // A held stream broken without a word from ipupodd: the server died or the
  // network failed (keepalive); either way the server dropped the session
  // with the connection. (A server shutting down says so itself.)
  if (IsTransportFailure(status, trailers)) return ConnectionLostError(session);
  // Not our cancellation, so the server's: it ended the session (e.g. the
  // lease ran out while this process was stopped).
  if (status.error_code() == grpc::StatusCode::CANCELLED) {
    return absl::AbortedError(
        absl::StrCat("session ", session,
                     " ended: ipupodd cancelled its stream (the session lease may have run out)"));
  }
  return FromGrpcStatus(status, trailers);
}

absl::Status AttachCall::EndBeforeGrant(const grpc::Status& status,
                                        const GrpcMetadata& trailers) const {
  if (status.error_code() == grpc::StatusCode::CANCELLED) {
    return absl::AbortedError("ipupodd cancelled the attach request; try again");
  }
  if (IsTransportFailure(status, trailers)) {
    if (last_ticket_) {
      return absl::UnavailableError(absl::StrCat(
          "connection to ipupodd lost while waiting in the queue (ticket ", *last_ticket_,
          "); the request is gone: attach again when the server is back (", status.error_message(),
          ")"));
    }
    return TransportFailureError(SiteOf(options_, "Attach", absl::ZeroDuration()),
                                 status.error_message());
  }
  if (status.ok()) {
    return absl::UnavailableError("ipupodd closed the attach stream without a grant; try again");
  }
  return FromGrpcStatus(status, trailers);
}

std::optional<v1::Preemption> AttachCall::preempted() const {
  sync::MutexLock lock(&mu_);
  return preempted_;
}

bool AttachCall::GrantEventReady() const { return !queued_.empty() || granted_ || ended_; }

template <typename Ready>
bool AttachCall::WaitUntil(Ready ready, absl::Time deadline) {
  while (!ready()) {
    if (sync::WaitWithDeadline(&changed_, &mu_, deadline) && !ready()) return false;
  }
  return true;
}

absl::Time AttachCall::GrantDeadline() const {
  if (!request_.wait()) return absl::Now() + options_.rpc_timeout;
  if (request_.wait_timeout_seconds() > 0) {
    return absl::Now() + absl::Seconds(request_.wait_timeout_seconds()) + options_.rpc_timeout;
  }
  return absl::InfiniteFuture();
}

absl::StatusOr<v1::SessionInfo> AttachCall::WaitForGrant(
    const std::function<void(const v1::QueuePosition&)>& on_queued) {
  const absl::Time deadline = GrantDeadline();
  while (true) {
    std::optional<v1::QueuePosition> position;
    std::optional<absl::StatusOr<v1::SessionInfo>> result;
    {
      sync::MutexLock lock(&mu_);
      if (!WaitUntil([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return GrantEventReady(); },
                     deadline)) {
        result = absl::DeadlineExceededError(absl::StrCat(
            "ipupodd at ", options_.server,
            " neither granted nor refused the attach in time; gave up and left the queue "
            "(raise --timeout or --wait-timeout to wait longer)"));
      } else if (!queued_.empty()) {
        position = std::move(queued_.front());
        queued_.pop_front();
      } else if (granted_) {
        result = *granted_;
      } else {
        result = end_status_;
      }
    }
    // The callback runs unlocked: it may take its time (printing) or Cancel().
    if (position) {
      if (on_queued) on_queued(*position);
      continue;
    }
    if (absl::IsDeadlineExceeded(result->status()) && !Ended()) Cancel();
    return *std::move(result);
  }
}

absl::Status AttachCall::WaitForEnd(absl::Duration timeout) {
  sync::MutexLock lock(&mu_);
  if (!WaitUntil([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ended_; },
                 absl::Now() + timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("session ", granted_ ? granted_->session() : std::string("(not granted)"),
                     " is still alive after ", absl::FormatDuration(timeout)));
  }
  return end_status_;
}

bool AttachCall::Ended() const {
  sync::MutexLock lock(&mu_);
  return ended_;
}

void AttachCall::Cancel() {
  {
    sync::MutexLock lock(&mu_);
    if (ended_) return;
    cancelled_ = true;
  }
  context_.TryCancel();
}

absl::Status AttachCall::Release() {
  std::string id;
  {
    sync::MutexLock lock(&mu_);
    if (!ended_) cancelled_ = true;  // whatever ends the stream now, we did
    if (granted_ && !ended_) id = granted_->session();
  }
  if (!id.empty()) {
    // Best effort: Detach returns once the server freed the IPUs, which makes
    // the release synchronous. Cancelling the stream (below) releases them
    // too, so a failed Detach (server gone, session already ended) is fine.
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
    AddIdentity(options_, context);
    v1::DetachRequest request;
    request.set_session(id);
    v1::DetachResponse response;
    (void)stub_->Detach(&context, request, &response);
  }
  context_.TryCancel();
  absl::Status end = WaitForEnd(kReaderStopWait);
  return Ended() ? absl::OkStatus() : end;
}

std::string AttachCall::session() const {
  sync::MutexLock lock(&mu_);
  return granted_ ? granted_->session() : std::string();
}

}  // namespace ipupod::client
