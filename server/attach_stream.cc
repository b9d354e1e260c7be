#include "server/attach_stream.h"

#include <utility>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/sync.h"
#include "server/auth.h"
#include "server/proto_convert.h"
#include "server/status_convert.h"

namespace ipupod::server {

template <typename Reactor>
AttachStreamBase<Reactor>::AttachStreamBase(grpc::CallbackServerContext* context,
                                            const ServiceEnv& env, absl::string_view method)
    : context_(context), env_(env), log_(method) {}

template <typename Reactor>
void AttachStreamBase<Reactor>::KeepUntilDone(std::shared_ptr<AttachStreamBase> self) {
  sync::MutexLock lock(&mu_);
  self_ = std::move(self);  // dropped in OnDone
}

template <typename Reactor>
void AttachStreamBase<Reactor>::Begin(const v1::AttachRequest& request) {
  absl::StatusOr<scheduler::Caller> caller = Authenticate(env_.auth, context_->client_metadata());
  if (!caller.ok()) return End(caller.status());
  {
    sync::MutexLock lock(&mu_);
    log_.set_user(caller->user);
    caller_ = *caller;
  }
  absl::StatusOr<scheduler::AttachRequest> attach = FromProto(request);
  if (!attach.ok()) return End(attach.status());
  // May call OnQueued/OnGranted before it returns; those only queue events.
  absl::StatusOr<std::string> ticket =
      env_.scheduler->Attach(*caller, *attach, this->shared_from_this());
  if (!ticket.ok()) return End(ticket.status());
  {
    sync::MutexLock lock(&mu_);
    ticket_ = *ticket;
  }
  env_.ticker->Add(this->shared_from_this());
}

template <typename Reactor>
void AttachStreamBase<Reactor>::End(const absl::Status& status) {
  sync::MutexLock lock(&mu_);
  EndLocked(status);
  PumpLocked();
}

template <typename Reactor>
void AttachStreamBase<Reactor>::OnQueued(const scheduler::QueuePositionView& position) {
  v1::AttachEvent event;
  ToProto(position, event.mutable_queued());
  sync::MutexLock lock(&mu_);
  if (end_status_) return;
  if (!queue_.empty() && queue_.back().has_queued()) {
    queue_.back() = std::move(event);  // only the latest position matters
  } else {
    EnqueueLocked(std::move(event));
  }
  PumpLocked();
}

template <typename Reactor>
void AttachStreamBase<Reactor>::OnGranted(const scheduler::SessionView& session) {
  v1::AttachEvent event;
  ToProto(session, event.mutable_granted());
  sync::MutexLock lock(&mu_);
  granted_ = true;
  granted_at_ = absl::Now();
  session_ = session.id;
  if (end_status_) return;
  EnqueueLocked(std::move(event));
  PumpLocked();
}

template <typename Reactor>
void AttachStreamBase<Reactor>::OnPreempted(const scheduler::PreemptionView& notice) {
  v1::AttachEvent event;
  v1::Preemption* p = event.mutable_preempted();
  p->set_session(notice.session);
  p->set_by_user(notice.by_user);
  p->set_by_qos(notice.by_qos);
  p->set_deadline_unix_ms(notice.deadline_unix_ms);
  p->set_grace_seconds(notice.grace_seconds);
  p->set_message(notice.message);
  sync::MutexLock lock(&mu_);
  if (end_status_) return;
  EnqueueLocked(std::move(event));
  PumpLocked();
}

template <typename Reactor>
void AttachStreamBase<Reactor>::OnEnded(const absl::Status& why) {
  sync::MutexLock lock(&mu_);
  EndLocked(why);
  PumpLocked();
}

template <typename Reactor>
void AttachStreamBase<Reactor>::Tick(absl::Time now) {
  bool stalled = false;
  {
    sync::MutexLock lock(&mu_);
    if (done_ || finish_called_) return;
    if (write_in_flight_ && !stall_cancelled_ && now - write_started_ > env_.lease) {
      stalled = stall_cancelled_ = true;
      EndLocked(absl::AbortedError(absl::StrCat("session ended: the client read nothing for ",
                                                absl::FormatDuration(env_.lease),
                                                " (the session lease)")));
      context_->TryCancel();  // fails the stuck write; OnWriteDone then finishes
    } else if (granted_ && !end_status_ && !write_in_flight_ && queue_.empty() &&
               now - write_started_ >= env_.lease / 2) {
      v1::AttachEvent heartbeat;
      heartbeat.mutable_heartbeat()->set_server_unix_ms(absl::ToUnixMillis(now));
      EnqueueLocked(std::move(heartbeat));
      PumpLocked();
    }
  }
  if (stalled) {
    spdlog::warn("attach stalled: no write completed within the lease; releasing");
    ReleaseTicket();
  }
}

template <typename Reactor>
void AttachStreamBase<Reactor>::OnWriteDone(bool ok) {
  std::string granted_log;
  {
    sync::MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (!ok) {
      queue_.clear();  // the stream is broken: nothing more will arrive
      EndLocked(absl::CancelledError("the client went away"));
    } else if (writing_.has_granted()) {
      const v1::SessionInfo& s = writing_.granted();
      granted_log = absl::StrCat("attach granted user=", s.user(), " session=", s.session(),
                                 " ipus=", absl::StrJoin(s.ipus(), ","),
                                 " waited_ms=", absl::ToInt64Milliseconds(log_.elapsed()));
    }
    PumpLocked();
  }
  if (!granted_log.empty()) spdlog::info("{}", granted_log);
  if (!ok) ReleaseTicket();
}

template <typename Reactor>
void AttachStreamBase<Reactor>::OnCancel() {
  {
    sync::MutexLock lock(&mu_);
    queue_.clear();
    EndLocked(absl::CancelledError("attach cancelled by the client"));
    PumpLocked();
  }
  ReleaseTicket();
}

template <typename Reactor>
void AttachStreamBase<Reactor>::OnDone() {
  ReleaseTicket();
  env_.ticker->Remove(this);
  std::shared_ptr<AttachStreamBase> keep;  // may be the last reference: destroyed at return
  sync::MutexLock lock(&mu_);
  done_ = true;
  absl::Status status = end_status_.value_or(absl::OkStatus());
  // The holder detaching its own session (`ipupod attach -- COMMAND`
  // ending) is how a session ends normally: the client still reads ABORTED
  // (the stream did not end by itself), but the log shows no error.
  const bool orderly = !status.ok() && scheduler::DetachedBy(status) == log_.user();
  if (granted_) {
    spdlog::info("attach ended user={} session={} code={} held_ms={}", log_.user(), session_,
                 orderly ? "OK" : absl::StatusCodeToString(status.code()),
                 absl::ToInt64Milliseconds(absl::Now() - granted_at_));
  }
  if (orderly) {
    log_.DoneNormally(status.message());
  } else if (status.ok() && granted_) {  // a Hold its holder closed
    log_.DoneNormally(absl::StrCat("session ", session_, " released by its holder"));
  } else {
    log_.Done(status);
  }
  keep = std::move(self_);
}

template <typename Reactor>
void AttachStreamBase<Reactor>::EnqueueLocked(v1::AttachEvent event) {
  if (queue_.size() >= kEventQueueMax) {
    EndLocked(absl::ResourceExhaustedError(
        absl::StrCat("attach stream ended: the client left ", kEventQueueMax, " events unread")));
    context_->TryCancel();  // OnCancel then releases the request
    return;
  }
  queue_.push_back(std::move(event));
}

template <typename Reactor>
void AttachStreamBase<Reactor>::EndLocked(const absl::Status& status) {
  if (!end_status_) end_status_ = status;
}

template <typename Reactor>
void AttachStreamBase<Reactor>::PumpLocked() {
  if (finish_called_ || write_in_flight_) return;
  if (queue_.size() == 1 && end_status_ && !detaching_) {
    // The last event and the status leave together (e.g. Hold's `released`
    // and OK): one write, one wakeup for the client. No OnWriteDone follows.
    writing_ = std::move(queue_.front());
    queue_.pop_front();
    finish_called_ = true;
    this->StartWriteAndFinish(&writing_, grpc::WriteOptions(),
                              ToGrpcStatus(context_, *end_status_));
    return;
  }
  if (!queue_.empty()) {
    writing_ = std::move(queue_.front());
    queue_.pop_front();
    write_in_flight_ = true;
    write_started_ = absl::Now();
    this->StartWrite(&writing_);
    return;
  }
  if (end_status_ && !detaching_) {
    finish_called_ = true;
    this->Finish(ToGrpcStatus(context_, *end_status_));
  }
}

template <typename Reactor>
void AttachStreamBase<Reactor>::ReleaseTicket() {
  std::string ticket;
  scheduler::Scheduler* scheduler = nullptr;
  {
    sync::MutexLock lock(&mu_);
    if (released_ || ticket_.empty()) return;
    released_ = true;
    ticket = ticket_;
    scheduler = env_.scheduler;  // after unlocking, touch no member: OnDone may free us
  }
  scheduler->Release(ticket);
}

template class AttachStreamBase<AttachWriteReactor>;
template class AttachStreamBase<AttachBidiReactor>;

// ---------------------------------------------------------------- Attach, Hold

AttachWriteReactor* AttachStream::Start(grpc::CallbackServerContext* context,
                                        const v1::AttachRequest& request, const ServiceEnv& env) {
  std::shared_ptr<AttachStream> stream(new AttachStream(context, env));
  stream->KeepUntilDone(stream);
  stream->Begin(request);
  return stream.get();
}

AttachBidiReactor* HoldStream::Start(grpc::CallbackServerContext* context, const ServiceEnv& env) {
  std::shared_ptr<HoldStream> stream(new HoldStream(context, env));
  stream->KeepUntilDone(stream);
  stream->StartRead(&stream->request_);
  return stream.get();
}

void HoldStream::OnReadDone(bool ok) {
  if (!request_read_) {
    request_read_ = true;
    if (!ok) {
      return End(absl::InvalidArgumentError(
          "the Hold stream was closed before its AttachRequest; send the request first"));
    }
    Begin(request_);
    bool ended = false;
    {
      sync::MutexLock lock(&mu_);
      ended = end_status_.has_value();
    }
    // Completes when the client closes its side (or sends what it must not).
    if (!ended) StartRead(&request_);
    return;
  }
  if (ok) {
    End(absl::InvalidArgumentError(
        "Hold takes one AttachRequest; close your side of the stream to detach"));
    return ReleaseTicket();
  }
  if (!context_->IsCancelled()) OnClientClosed();  // a cancellation is OnCancel's
}

void HoldStream::OnClientClosed() {
  std::string session;
  scheduler::Caller caller;
  {
    sync::MutexLock lock(&mu_);
    if (end_status_ || finish_called_) return;  // ending already (e.g. detached elsewhere)
    if (!granted_) {
      EndLocked(absl::CancelledError(
          "the client closed the Hold stream before the grant; the request left the queue"));
      PumpLocked();
    } else {
      detaching_ = true;  // PumpLocked waits for `released`
      session = session_;
      caller = *caller_;
    }
  }
  if (session.empty()) return ReleaseTicket();
  // Exactly the Detach RPC's release; its OnEnded (detached by the holder)
  // arrives here before it returns and is replaced by OK below.
  absl::StatusOr<std::vector<int>> released = env_.scheduler->Detach(caller, session);
  sync::MutexLock lock(&mu_);
  detaching_ = false;
  if (released.ok()) {
    v1::AttachEvent event;
    event.mutable_released()->set_session(session);
    for (int ipu : *released)
      event.mutable_released()->add_released_ipus(static_cast<uint32_t>(ipu));
    queue_.push_back(std::move(event));  // past the bound: the last event there will be
    end_status_ = absl::OkStatus();
  } else {
    EndLocked(released.status());
  }
  PumpLocked();
}

}  // namespace ipupod::server
