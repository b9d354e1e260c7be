#include "server/stream_idle_watch.h"

#include <grpc/grpc.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_format.h"
#include "common/sync.h"

namespace ipupod::server {

StreamIdleWatch::StreamIdleWatch(grpc::ServerContext* context, absl::string_view method,
                                 absl::Duration idle)
    : method_(method), idle_(idle), context_(context) {}

void StreamIdleWatch::BeginWait(Wait what, absl::Time now) {
  sync::MutexLock lock(&mu_);
  waiting_since_ = now;
  waiting_for_ = what;
}

void StreamIdleWatch::EndWait() {
  sync::MutexLock lock(&mu_);
  waiting_since_ = absl::InfiniteFuture();
}

void StreamIdleWatch::Stop() {
  sync::MutexLock lock(&mu_);
  context_ = nullptr;
}

bool StreamIdleWatch::expired() const {
  sync::MutexLock lock(&mu_);
  return expired_;
}

absl::Status StreamIdleWatch::ExpiredStatus() const {
  sync::MutexLock lock(&mu_);
  return ExpiredStatusLocked();
}

absl::Status StreamIdleWatch::ExpiredStatusLocked() const {
  const int64_t seconds = absl::ToInt64Seconds(idle_);
  if (waiting_for_ == Wait::kWrite) {
    return absl::DeadlineExceededError(absl::StrFormat(
        "%s: the client read nothing for %d s; the server ended it (ipupodd "
        "--execution-stream-idle-seconds %d): read the stream as it comes, or start the call "
        "again",
        method_, seconds, seconds));
  }
  return absl::DeadlineExceededError(absl::StrFormat(
      "%s sent nothing for %d s; the server ended it (ipupodd --execution-stream-idle-seconds "
      "%d): keep sending without pauses that long, or start the call again",
      method_, seconds, seconds));
}

// Cancels under the lock: Stop() waits for it, so the call is still running.
void StreamIdleWatch::Tick(absl::Time now) {
  sync::MutexLock lock(&mu_);
  if (context_ == nullptr || expired_ || now - waiting_since_ < idle_) return;
  expired_ = true;
  const std::string message(ExpiredStatusLocked().message());
  spdlog::warn("ending method={}: the client {} nothing for {}", method_,
               waiting_for_ == Wait::kWrite ? "read" : "sent",
               absl::FormatDuration(now - waiting_since_));
  grpc_call_cancel_with_status(context_->c_call(), GRPC_STATUS_DEADLINE_EXCEEDED, message.c_str(),
                               nullptr);
}

ScopedStreamIdleWatch::ScopedStreamIdleWatch(StreamTicker* ticker, grpc::ServerContext* context,
                                             absl::string_view method, absl::Duration idle)
    : ticker_(ticker) {
  if (ticker_ == nullptr) return;
  watch_ = std::make_shared<StreamIdleWatch>(context, method, idle);
  ticker_->Add(watch_);
}

ScopedStreamIdleWatch::~ScopedStreamIdleWatch() {
  if (watch_ == nullptr) return;
  watch_->Stop();
  ticker_->Remove(watch_.get());
}

absl::Status ScopedStreamIdleWatch::Outcome(absl::Status status) const {
  if (watch_ != nullptr && watch_->expired()) return watch_->ExpiredStatus();
  return status;
}

}  // namespace ipupod::server
