// File: server/service_env.h
//
// What every service handler shares (ServiceEnv), and the two shapes of a
// unary handler on gRPC's callback API:
//   HandleUnary       authenticate, run a synchronous scheduler call, finish
//   HandleUnaryAsync  authenticate, start an asynchronous scheduler call
//                     (resets) and finish from its completion callback
// Both convert the absl::Status (with its error payloads as trailing
// metadata) and log one line per request.
//
// Thread safety: ServiceEnv is immutable after PodServer builds it; the
// pointers it holds outlive every RPC (PodServer destroys the gRPC server
// first). Handlers run on gRPC's callback threads.
#ifndef IPUPOD_SERVER_SERVICE_ENV_H_
#define IPUPOD_SERVER_SERVICE_ENV_H_

#include <atomic>
#include <functional>
#include <memory>
#include <utility>

#include <grpcpp/server_context.h>
#include <grpcpp/support/server_callback.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "device/pod_config.h"
#include "scheduler/scheduler.h"
#include "server/auth.h"
#include "server/proto_convert.h"
#include "server/request_log.h"
#include "server/status_convert.h"
#include "server/stream_ticker.h"

namespace ipupod::server {

class AuditTrail;  // server/audit_trail.h

struct ServiceEnv {
  scheduler::Scheduler* scheduler = nullptr;
  AuthPolicy auth;
  device::PodConfig pod;
  absl::Duration lease = absl::Seconds(10);
  StreamTicker* ticker = nullptr;
  // A client stream of ExecutionService silent this long is ended
  // (server/stream_idle_watch.h).
  absl::Duration stream_idle = absl::Seconds(30);
  // Set by PodServer::Shutdown before anything stops; null in tests that
  // build an env by hand (never shutting down).
  const std::atomic<bool>* shutting_down = nullptr;
  // Where privileged and destructive actions are recorded
  // (server/audit_trail.h: AuditAction); null = nowhere (tests).
  AuditTrail* audit = nullptr;
  // An upload slower than this (bytes/s) once it has waited stream_idle is
  // ended (server/stream_idle_watch.h); 0 = no bound.
  int64_t upload_min_bytes_per_second = 0;
  // config accounting_public: everyone may see everyone's usage; otherwise
  // a user sees their own and admins everyone's (docs/accounting.md).
  bool usage_public = false;

  bool ShuttingDown() const { return shutting_down != nullptr && shutting_down->load(); }
};

// `body(caller)` returns the call's status; the response is filled by it.
template <typename Body>
grpc::ServerUnaryReactor* HandleUnary(grpc::CallbackServerContext* context, const ServiceEnv& env,
                                      absl::string_view method, Body&& body) {
  RequestLog log(method);
  absl::StatusOr<scheduler::Caller> caller = Authenticate(env.auth, context->client_metadata());
  absl::Status status = caller.status();
  if (caller.ok()) {
    log.set_user(caller->user);
    status = body(*caller);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(context, status));
  log.Done(status);
  return reactor;
}

// Finishes one asynchronous unary RPC exactly once: from the first Finish(),
// or, if the callback holding it is dropped unrun, from the destructor with
// UNAVAILABLE (so the RPC can never hang).
class PendingUnary {
 public:
  PendingUnary(grpc::CallbackServerContext* context, absl::string_view method)
      : context_(context), reactor_(context->DefaultReactor()), log_(method) {}
  ~PendingUnary() { Finish(absl::UnavailableError("the server dropped this request; retry")); }
  PendingUnary(const PendingUnary&) = delete;
  PendingUnary& operator=(const PendingUnary&) = delete;

  RequestLog& log() { return log_; }
  grpc::ServerUnaryReactor* reactor() const { return reactor_; }
  void Finish(const absl::Status& status) {
    if (finished_.exchange(true)) return;
    reactor_->Finish(ToGrpcStatus(context_, status));
    log_.Done(status);
  }

 private:
  grpc::CallbackServerContext* const context_;
  grpc::ServerUnaryReactor* const reactor_;
  RequestLog log_;
  std::atomic<bool> finished_{false};
};

// `start(caller, done)` starts the scheduler call; `done(result)` fills
// `response` via ToProto and finishes the RPC.
template <typename Result, typename Response, typename Start>
grpc::ServerUnaryReactor* HandleUnaryAsync(grpc::CallbackServerContext* context,
                                           const ServiceEnv& env, absl::string_view method,
                                           Response* response, Start&& start) {
  auto pending = std::make_shared<PendingUnary>(context, method);
  grpc::ServerUnaryReactor* reactor = pending->reactor();
  absl::StatusOr<scheduler::Caller> caller = Authenticate(env.auth, context->client_metadata());
  if (!caller.ok()) {
    pending->Finish(caller.status());
    return reactor;
  }
  pending->log().set_user(caller->user);
  start(*caller, [pending, response](absl::StatusOr<Result> result) {
    if (result.ok()) ToProto(*result, response);
    pending->Finish(result.status());
  });
  return reactor;
}

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_SERVICE_ENV_H_
