#include "server/stream_idle_watch.h"

#include <grpc/grpc.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_format.h"
#include "common/sync.h"

namespace ipupod::server {

StreamIdleWatch::StreamIdleWatch(grpc::ServerContext* context, absl::string_view method,
                                 absl::Duration idle, int64_t min_upload_bytes_per_second)
    : method_(method),
      idle_(idle),
      min_upload_bytes_per_second_(min_upload_bytes_per_second),
      context_(context) {}

void StreamIdleWatch::BeginWait(Wait what, absl::Time now) {
  sync::MutexLock lock(&mu_);
  waiting_since_ = now;
  waiting_for_ = what;
}

void StreamIdleWatch::EndWait(uint64_t read_bytes, absl::Time now) {
  sync::MutexLock lock(&mu_);
  if (waiting_for_ == Wait::kRead && now > waiting_since_) read_waited_ += now - waiting_since_;
  read_bytes_ += read_bytes;
  waiting_since_ = absl::InfiniteFuture();
}

bool StreamIdleWatch::TooSlowLocked(absl::Time now) const {
  if (min_upload_bytes_per_second_ <= 0 || waiting_for_ != Wait::kRead ||
      waiting_since_ == absl::InfiniteFuture()) {
    return false;
  }
  const absl::Duration waited = read_waited_ + (now - waiting_since_);
  return waited >= idle_ &&
         static_cast<double>(read_bytes_) <
             static_cast<double>(min_upload_bytes_per_second_) * absl::ToDoubleSeconds(waited);
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
  if (too_slow_) {
    return absl::DeadlineExceededError(absl::StrFormat(
        "%s sent %d bytes in %d s of the server waiting for them, under the %d bytes/s an "
        "upload must keep (ipupodd --upload-min-bytes-per-second); the server ended it and "
        "freed what it reserved: send faster, in larger messages, or start the call again",
        method_, read_bytes_, absl::ToInt64Seconds(read_waited_), min_upload_bytes_per_second_));
  }
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
  if (context_ == nullptr || expired_) return;
  too_slow_ = now - waiting_since_ < idle_ && TooSlowLocked(now);
  if (!too_slow_ && now - waiting_since_ < idle_) return;
  expired_ = true;
  if (too_slow_) {
    read_waited_ += now - waiting_since_;  // what the message reports
    spdlog::warn("ending method={}: the upload sent {} bytes in {} of waiting", method_,
                 read_bytes_, absl::FormatDuration(read_waited_));
  } else {
    spdlog::warn("ending method={}: the client {} nothing for {}", method_,
                 waiting_for_ == Wait::kWrite ? "read" : "sent",
                 absl::FormatDuration(now - waiting_since_));
  }
  const std::string message(ExpiredStatusLocked().message());
  grpc_call_cancel_with_status(context_->c_call(), GRPC_STATUS_DEADLINE_EXCEEDED, message.c_str(),
                               nullptr);
}

ScopedStreamIdleWatch::ScopedStreamIdleWatch(StreamTicker* ticker, grpc::ServerContext* context,
                                             absl::string_view method, absl::Duration idle,
                                             int64_t min_upload_bytes_per_second)
    : ticker_(ticker) {
  if (ticker_ == nullptr) return;
  watch_ = std::make_shared<StreamIdleWatch>(context, method, idle, min_upload_bytes_per_second);
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
