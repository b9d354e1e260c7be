// File: server/sync_handlers.h
//
// The shape of every handler of the services on gRPC's synchronous thread
// pool (ExecutionService, JobService): authenticate, enter the service's
// call bound (server/call_limit.h), run the body, log one line, convert the
// absl::Status (with its error payloads) to a grpc::Status. Streaming calls
// read and write through an idle watch (server/stream_idle_watch.h). A call
// that ends while the server shuts down says so (UNAVAILABLE), instead of
// reaching the client as CANCELLED or "Socket closed".
//
// Thread safety: handlers run concurrently; the ServiceEnv and CallLimit
// outlive them.
#ifndef IPUPOD_SERVER_SYNC_HANDLERS_H_
#define IPUPOD_SERVER_SYNC_HANDLERS_H_

#include <type_traits>
#include <utility>

#include <grpcpp/server_context.h>
#include <grpcpp/support/sync_stream.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "scheduler/scheduler.h"
#include "server/auth.h"
#include "server/call_limit.h"
#include "server/request_log.h"
#include "server/service_env.h"
#include "server/status_convert.h"
#include "server/stream_idle_watch.h"

namespace ipupod::server {

inline absl::Status ShuttingDownError(absl::string_view what) {
  return absl::UnavailableError(
      absl::StrCat("ipupodd is shutting down: ", what, "; retry when the server is back"));
}

// A call that ends while the server shuts down says so: its session has
// ended with the server, and a cancelled stream or a failed write would
// otherwise reach the client as CANCELLED or "Socket closed".
inline absl::Status DuringShutdown(const ServiceEnv& env, absl::string_view method,
                                   absl::Status status) {
  if (status.ok() || absl::IsUnavailable(status) || !env.ShuttingDown()) return status;
  return ShuttingDownError(absl::StrCat(method, " did not complete (", status.message(), ")"));
}

// The call leaves `calls` before its status is sent, so a client's next
// call never finds its previous one still counted.
template <typename Body>
grpc::Status Handle(grpc::ServerContext* context, const ServiceEnv& env, CallLimit& calls,
                    absl::string_view method, Body&& body) {
  RequestLog log(method);
  absl::StatusOr<scheduler::Caller> caller = Authenticate(env.auth, context->client_metadata());
  absl::Status status = caller.status();
  if (caller.ok()) {
    log.set_user(caller->user);
    absl::StatusOr<CallLimit::Ticket> admitted = calls.Enter(method, caller->user);
    status = admitted.ok() ? body(*caller) : admitted.status();
  }
  status = DuringShutdown(env, method, std::move(status));
  log.Done(status);
  return ToGrpcStatus(context, status);
}

// A client-streaming call (grpc::ServerReader) is an upload, held to
// env.upload_min_bytes_per_second besides the idle bound.
template <typename Stream>
struct IsUpload : std::false_type {};
template <typename Message>
struct IsUpload<grpc::ServerReader<Message>> : std::true_type {};

// A streaming call: its reads and writes go through an idle watch
// (server/stream_idle_watch.h), and a call the watch ended answers
// DEADLINE_EXCEEDED whatever its body made of the lost stream.
template <typename Stream, typename Body>
grpc::Status HandleStream(grpc::ServerContext* context, const ServiceEnv& env, CallLimit& calls,
                          absl::string_view method, Stream* stream, Body&& body) {
  return Handle(context, env, calls, method, [&](const scheduler::Caller& caller) -> absl::Status {
    ScopedStreamIdleWatch watch(env.ticker, context, method, env.stream_idle,
                                IsUpload<Stream>::value ? env.upload_min_bytes_per_second : 0);
    WatchedStream<Stream> watched(stream, &watch);
    return watch.Outcome(body(caller, watched));
  });
}

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_SYNC_HANDLERS_H_
