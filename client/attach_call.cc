// AttachCall over SessionService.Hold with gRPC's callback API: the stream's
// reactions (on gRPC's threads) record what arrives, the caller's thread
// waits for it. No thread is started per session, and the session ends with
// the client's half-close, which the server answers with `released` and OK:
// an attach + detach is two exchanges on one stream.
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/client.h"
#include "client/grpc_status.h"
#include "client/unary_call.h"
#include "common/sync.h"  // header only: absl::Mutex as TSan sees it

namespace ipupod::client {
namespace {

constexpr size_t kQueuedEventsMax = 64;
// How long Release() waits for the stream to end after cancelling it;
// cancellation is local, so this is only a guard.
constexpr absl::Duration kCancelWait = absl::Seconds(5);
// How long the destructor waits for the stream's last reaction after
// cancelling it; gRPC delivers it promptly, so this too is only a guard.
constexpr absl::Duration kDoneWait = absl::Seconds(30);

}  // namespace

// The Hold call. Its AttachCall owns it and destroys it on its own thread
// once OnDone has returned (done_): never on gRPC's callback thread, where
// dropping the last reference to the channel aborts inside gRPC.
class AttachCall::Stream final
    : public grpc::ClientBidiReactor<v1::AttachRequest, v1::AttachEvent> {
 public:
  Stream(ClientOptions options, std::shared_ptr<v1::SessionService::Stub> stub,
         v1::AttachRequest request)
      : options_(std::move(options)), stub_(std::move(stub)), request_(std::move(request)) {}

  void Start();
  // Waits up to `timeout` for OnDone to have run; true once it has.
  bool WaitDone(absl::Duration timeout) {
    return sync::WaitForNotificationWithTimeout(&done_, timeout);
  }

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

  absl::StatusOr<v1::SessionInfo> WaitForGrant(
      const std::function<void(const v1::QueuePosition&)>& on_queued);
  absl::Status WaitForEnd(absl::Duration timeout);
  bool Ended() const;
  void Cancel();
  absl::Status Release();
  std::string session() const;
  std::optional<v1::Preemption> preempted() const;

 private:
  // Maps the final grpc status of the stream to what the caller sees.
  absl::Status EndStatus(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status EndAfterGrant(const grpc::Status& status, const GrpcMetadata& trailers,
                             absl::string_view session) const;
  absl::Status EndBeforeGrant(const grpc::Status& status, const GrpcMetadata& trailers) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool GrantEventReady() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits on changed_ until `ready` holds or `deadline`; false on timeout.
  // (A CondVar loop rather than absl::Condition: Debian's libabsl evaluates
  // Conditions inside itself, where ThreadSanitizer cannot see the lock.)
  template <typename Ready>
  bool WaitUntil(Ready ready, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Time GrantDeadline() const;
  // Takes away the hold that keeps the stream open for a later WritesDone;
  // true when this call took it (exactly one caller does).
  bool TakeHold() ABSL_LOCKS_EXCLUDED(mu_);

  const ClientOptions options_;
  const std::shared_ptr<v1::SessionService::Stub> stub_;
  const v1::AttachRequest request_;
  grpc::ClientContext context_;  // TryCancel is thread-safe
  v1::AttachEvent event_;        // written by one read at a time

  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // signalled on every change of the state below
  // Queue positions not yet handed to WaitForGrant; bounded (oldest dropped,
  // only the latest position matters).
  std::deque<v1::QueuePosition> queued_ ABSL_GUARDED_BY(mu_);
  std::optional<v1::SessionInfo> granted_ ABSL_GUARDED_BY(mu_);
  std::optional<v1::Preemption> preempted_ ABSL_GUARDED_BY(mu_);
  std::optional<std::string> last_ticket_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  // The hold (AddHold) lets Release() close the stream's write side from
  // outside a reaction; it goes once reads end or Release() used it.
  bool holding_ ABSL_GUARDED_BY(mu_) = true;
  absl::Status end_status_ ABSL_GUARDED_BY(mu_);
  // Notified as OnDone's last act; then the Stream may be destroyed.
  absl::Notification done_;
};

void AttachCall::Stream::Start() {
  AddIdentity(options_, context_);
  // Headers and the request leave in one write; the grant is the answer.
  context_.set_initial_metadata_corked(true);
  stub_->async()->Hold(&context_, this);
  StartWrite(&request_);
  StartRead(&event_);
  AddHold();
  // gRPC runs the reactions on its own threads, ordered after this inside
  // libgrpc, where TSan cannot see it: the edge it needs (this object was
  // built on the caller's thread).
  sync::Released(this);
  StartCall();
}

void AttachCall::Stream::OnReadDone(bool ok) {
  sync::Acquired(this);
  if (!ok) {
    // The server ended the stream (or it broke): nothing more to write, so
    // the hold goes and OnDone can come.
    if (TakeHold()) RemoveHold();
    return;
  }
  {
    sync::MutexLock lock(&mu_);
    if (event_.has_queued()) {
      if (queued_.size() == kQueuedEventsMax) queued_.pop_front();
      last_ticket_ = event_.queued().ticket();
      queued_.push_back(event_.queued());
    } else if (event_.has_granted() && !granted_) {
      granted_ = event_.granted();
    } else if (event_.has_preempted()) {
      preempted_ = event_.preempted();
    }
    // Heartbeats only prove the session is alive; `released` is followed by
    // the end of the stream, which OnDone reports.
    changed_.SignalAll();
  }
  StartRead(&event_);
}

void AttachCall::Stream::OnDone(const grpc::Status& status) {
  sync::Acquired(this);
  {
    sync::MutexLock lock(&mu_);
    end_status_ = EndStatus(status);
    ended_ = true;
    changed_.SignalAll();
  }
  sync::Notify(&done_);  // the last touch: the owner may destroy this now
}

bool AttachCall::Stream::TakeHold() {
  sync::MutexLock lock(&mu_);
  if (!holding_) return false;
  holding_ = false;
  return true;
}

absl::Status AttachCall::Stream::EndStatus(const grpc::Status& status) {
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

absl::Status AttachCall::Stream::EndAfterGrant(const grpc::Status& status,
                                               const GrpcMetadata& trailers,
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

absl::Status AttachCall::Stream::EndBeforeGrant(const grpc::Status& status,
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

std::optional<v1::Preemption> AttachCall::Stream::preempted() const {
  sync::MutexLock lock(&mu_);
  return preempted_;
}

bool AttachCall::Stream::GrantEventReady() const { return !queued_.empty() || granted_ || ended_; }

template <typename Ready>
bool AttachCall::Stream::WaitUntil(Ready ready, absl::Time deadline) {
  while (!ready()) {
    if (sync::WaitWithDeadline(&changed_, &mu_, deadline) && !ready()) return false;
  }
  return true;
}

absl::Time AttachCall::Stream::GrantDeadline() const {
  if (!request_.wait()) return absl::Now() + options_.rpc_timeout;
  if (request_.wait_timeout_seconds() > 0) {
    return absl::Now() + absl::Seconds(request_.wait_timeout_seconds()) + options_.rpc_timeout;
  }
  return absl::InfiniteFuture();
}

absl::StatusOr<v1::SessionInfo> AttachCall::Stream::WaitForGrant(
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

absl::Status AttachCall::Stream::WaitForEnd(absl::Duration timeout) {
  sync::MutexLock lock(&mu_);
  if (!WaitUntil([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ended_; },
                 absl::Now() + timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("session ", granted_ ? granted_->session() : std::string("(not granted)"),
                     " is still alive after ", absl::FormatDuration(timeout)));
  }
  return end_status_;
}

bool AttachCall::Stream::Ended() const {
  sync::MutexLock lock(&mu_);
  return ended_;
}

void AttachCall::Stream::Cancel() {
  {
    sync::MutexLock lock(&mu_);
    if (ended_) return;
    cancelled_ = true;
  }
  context_.TryCancel();
}

absl::Status AttachCall::Stream::Release() {
  bool granted = false;
  {
    sync::MutexLock lock(&mu_);
    if (!ended_) cancelled_ = true;  // whatever ends the stream now, we did
    granted = granted_ && !ended_;
  }
  // The half-close asks the server to detach; it answers `released` and OK,
  // so the IPUs are free once the stream has ended.
  if (granted && TakeHold()) {
    StartWritesDone();
    RemoveHold();
    if (WaitForEnd(options_.rpc_timeout).ok() || Ended()) return absl::OkStatus();
  }
  context_.TryCancel();
  absl::Status end = WaitForEnd(kCancelWait);
  return Ended() ? absl::OkStatus() : end;
}

std::string AttachCall::Stream::session() const {
  sync::MutexLock lock(&mu_);
  return granted_ ? granted_->session() : std::string();
}

// ---------------------------------------------------------------- AttachCall

std::unique_ptr<AttachCall> Client::StartAttach(const v1::AttachRequest& request) {
  auto stream = std::make_unique<AttachCall::Stream>(options_, sessions_, request);
  stream->Start();
  return std::unique_ptr<AttachCall>(new AttachCall(std::move(stream)));
}

AttachCall::AttachCall(std::unique_ptr<Stream> stream) : stream_(std::move(stream)) {}

AttachCall::~AttachCall() {
  stream_->Cancel();
  // gRPC may use the Stream until OnDone; should that never come, leaking it
  // is the safe way out.
  if (!stream_->WaitDone(kDoneWait)) (void)stream_.release();
}

absl::StatusOr<v1::SessionInfo> AttachCall::WaitForGrant(
    const std::function<void(const v1::QueuePosition&)>& on_queued) {
  return stream_->WaitForGrant(on_queued);
}

absl::Status AttachCall::WaitForEnd(absl::Duration timeout) { return stream_->WaitForEnd(timeout); }

bool AttachCall::Ended() const { return stream_->Ended(); }

void AttachCall::Cancel() { stream_->Cancel(); }

absl::Status AttachCall::Release() { return stream_->Release(); }

std::string AttachCall::session() const { return stream_->session(); }

std::optional<v1::Preemption> AttachCall::preempted() const { return stream_->preempted(); }

}  // namespace ipupod::client
