// File: server/attach_stream.h
//
// AttachStream: one SessionService.Attach call; HoldStream: one
// SessionService.Hold call (the same session on a bidirectional stream,
// whose client ends it by closing its side). Each is at once the gRPC
// reactor for the stream and the scheduler's AttachObserver for the
// request, so no thread waits for a grant:
//
//   scheduler --OnQueued/OnGranted/OnPreempted/OnEnded--> bounded event queue --> StartWrite
//   client gone (OnCancel/OnDone, failed write) --> Scheduler::Release(ticket)
//   StreamTicker --Tick--> heartbeat every lease/2 while granted; a write
//                          outstanding longer than the lease ends the session
//   Hold only: client closes its side --> Scheduler::Detach (as the Detach
//                          RPC does) --> `released` event --> Finish(OK)
//
// The stream finishes with the status OnEnded reports (DEADLINE_EXCEEDED,
// ABORTED, UNAVAILABLE at shutdown) or with the error Attach returned; a
// Hold its client closed after the grant finishes OK after `released`.
//
// Thread safety: observer callbacks arrive with the scheduler's mutex held;
// they only queue events under this stream's own mutex (lock order:
// scheduler before stream) and never call the scheduler. Release() and
// Detach() are always called with no stream lock held. Reactor operations
// (StartWrite, Finish, TryCancel) are issued under the stream mutex: gRPC
// runs reactions of a non-inline reactor on its own threads, never inside
// these calls.
//
// Ownership: shared. The stream holds itself until OnDone; the scheduler
// holds it as an observer until the request ends; the ticker holds a weak_ptr.
#ifndef IPUPOD_SERVER_ATTACH_STREAM_H_
#define IPUPOD_SERVER_ATTACH_STREAM_H_

#include <deque>
#include <memory>
#include <optional>
#include <string>

#include <grpcpp/server_context.h>
#include <grpcpp/support/server_callback.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ipupod/v1/pod.pb.h"
#include "scheduler/scheduler.h"
#include "server/request_log.h"
#include "server/service_env.h"
#include "server/stream_ticker.h"

namespace ipupod::server {

using AttachWriteReactor = grpc::ServerWriteReactor<v1::AttachEvent>;
using AttachBidiReactor = grpc::ServerBidiReactor<v1::AttachRequest, v1::AttachEvent>;

// What Attach and Hold share: the session's life on a stream of events.
// Reactor is AttachWriteReactor or AttachBidiReactor (instantiated for both
// in attach_stream.cc).
template <typename Reactor>
class AttachStreamBase : public Reactor,
                         public scheduler::AttachObserver,
                         public Tickable,
                         public std::enable_shared_from_this<AttachStreamBase<Reactor>> {
 public:
  // Events waiting to be written; queue positions coalesce, so in practice
  // the queue holds at most a position, the grant and a heartbeat. A client
  // that lets it fill up loses its request (RESOURCE_EXHAUSTED).
  static constexpr size_t kEventQueueMax = 16;

  ~AttachStreamBase() override = default;
  AttachStreamBase(const AttachStreamBase&) = delete;
  AttachStreamBase& operator=(const AttachStreamBase&) = delete;

  // scheduler::AttachObserver (scheduler mutex held).
  void OnQueued(const scheduler::QueuePositionView& position) override;
  void OnGranted(const scheduler::SessionView& session) override;
  void OnEnded(const absl::Status& why) override;
  void OnPreempted(const scheduler::PreemptionView& notice) override;

  // Tickable (ticker thread).
  void Tick(absl::Time now) override;

  // grpc::ServerWriteReactor (gRPC threads).
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 protected:
  AttachStreamBase(grpc::CallbackServerContext* context, const ServiceEnv& env,
                   absl::string_view method);
  // Holds the stream until OnDone.
  void KeepUntilDone(std::shared_ptr<AttachStreamBase> self) ABSL_LOCKS_EXCLUDED(mu_);
  // Authenticates and calls Scheduler::Attach; errors end the stream.
  void Begin(const v1::AttachRequest& request);
  void End(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

  void EnqueueLocked(v1::AttachEvent event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records why the stream ends (the first reason wins); Pump finishes it.
  void EndLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts the next write, or Finish once the queue is empty and an end is set.
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Scheduler::Release(ticket) once. Never under mu_ (lock order).
  void ReleaseTicket() ABSL_LOCKS_EXCLUDED(mu_);

  grpc::CallbackServerContext* const context_;
  const ServiceEnv& env_;

  absl::Mutex mu_;
  std::deque<v1::AttachEvent> queue_ ABSL_GUARDED_BY(mu_);
  // The event being written; gRPC reads it until OnWriteDone.
  v1::AttachEvent writing_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time write_started_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> end_status_ ABSL_GUARDED_BY(mu_);
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool granted_ ABSL_GUARDED_BY(mu_) = false;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  bool stall_cancelled_ ABSL_GUARDED_BY(mu_) = false;  // cancelled once for a stuck write
  std::string ticket_ ABSL_GUARDED_BY(mu_);
  std::string session_ ABSL_GUARDED_BY(mu_);
  absl::Time granted_at_ ABSL_GUARDED_BY(mu_);
  RequestLog log_ ABSL_GUARDED_BY(mu_);
  std::optional<scheduler::Caller> caller_ ABSL_GUARDED_BY(mu_);  // once authenticated
  // Hold: the client closed its side and the session is being detached; the
  // stream must not finish before `released` is queued.
  bool detaching_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<AttachStreamBase> self_ ABSL_GUARDED_BY(mu_);
};

class AttachStream final : public AttachStreamBase<AttachWriteReactor> {
 public:
  // Authenticates, calls Scheduler::Attach, and returns the reactor that gRPC
  // drives from here on. Errors finish the stream at once.
  static AttachWriteReactor* Start(grpc::CallbackServerContext* context,
                                   const v1::AttachRequest& request, const ServiceEnv& env);

 private:
  AttachStream(grpc::CallbackServerContext* context, const ServiceEnv& env)
      : AttachStreamBase(context, env, "Attach") {}
};

// Hold: reads the AttachRequest, then one more read that completes when the
// client closes its side (detach, `released`, OK) or sends a second message
// (INVALID_ARGUMENT).
class HoldStream final : public AttachStreamBase<AttachBidiReactor> {
 public:
  static AttachBidiReactor* Start(grpc::CallbackServerContext* context, const ServiceEnv& env);

  // grpc::ServerBidiReactor (gRPC threads; one read at a time).
  void OnReadDone(bool ok) override;

 private:
  HoldStream(grpc::CallbackServerContext* context, const ServiceEnv& env)
      : AttachStreamBase(context, env, "Hold") {}
  // The client closed its side: detach the session as Detach does (or leave
  // the queue before the grant).
  void OnClientClosed() ABSL_LOCKS_EXCLUDED(mu_);

  // Written by reads only (one at a time, ordered by gRPC): the request,
  // then whatever a client sends after it.
  v1::AttachRequest request_;
  bool request_read_ = false;
};

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_ATTACH_STREAM_H_
