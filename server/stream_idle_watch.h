// File: server/stream_idle_watch.h
//
// StreamIdleWatch: ends a streaming ExecutionService call whose client has
// stalled for `idle` (ipupodd --execution-stream-idle-seconds): it sent
// nothing while the server waited to read, or it took nothing while the
// server waited to write (flow control holds a write until the client reads).
// Without it a client that sends one chunk and goes silent, or asks for a
// gigabyte of weights and never reads them, holds a sync-pool thread, an
// execution call and the bytes in flight for as long as it likes.
//
// The server-wide StreamTicker (server/stream_ticker.h) visits each watch;
// no thread or timer per stream. Only time spent blocked on the client
// counts (between BeginWait and EndWait, around a read or a write): a call
// waiting for its session's slot or for compute is not idle. An expired
// watch cancels the call with DEADLINE_EXCEEDED and a message naming the
// method, what the client did not do, the bound and its flag
// (grpc_call_cancel_with_status: the client sees that status, the blocked
// read or write returns false, and the handler returns and frees what it
// held).
//
// Uploads (client-streaming calls: PutBlob, UploadExecutable, WriteWeights)
// are also held to a minimum rate (ipupodd --upload-min-bytes-per-second):
// a client that sends a byte now and then is never silent for `idle`, yet
// would keep its call and what the upload reserved for as long as it
// liked. The rate is the bytes read over the time spent waiting for them;
// once that time reaches `idle`, an upload below the rate is ended the same
// way, its message naming the rate and the flag.
//
// Thread safety: BeginWait/EndWait/expired/ExpiredStatus from the handler's
// thread, Tick from the ticker's; one mutex. Stop() (called by the
// destructor of ScopedStreamIdleWatch) returns only when no Tick can touch
// the call any more, so the call outlives every cancellation.
// Errors: ExpiredStatus - DEADLINE_EXCEEDED.
#ifndef IPUPOD_SERVER_STREAM_IDLE_WATCH_H_
#define IPUPOD_SERVER_STREAM_IDLE_WATCH_H_

#include <memory>
#include <string>

#include <grpcpp/server_context.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/stream_ticker.h"

namespace ipupod::server {

class StreamIdleWatch final : public Tickable {
 public:
  // REQUIRES: idle > 0; `context` belongs to a running call and outlives
  // Stop(). min_upload_bytes_per_second > 0 holds the reads to that rate.
  StreamIdleWatch(grpc::ServerContext* context, absl::string_view method, absl::Duration idle,
                  int64_t min_upload_bytes_per_second = 0);
  StreamIdleWatch(const StreamIdleWatch&) = delete;
  StreamIdleWatch& operator=(const StreamIdleWatch&) = delete;

  // What the handler is blocked on: the client's next message, or the
  // client taking what was written.
  enum class Wait { kRead, kWrite };
  void BeginWait(Wait what, absl::Time now = absl::Now());
  // `read_bytes`: the size of the message a read brought (0 for a write).
  void EndWait(uint64_t read_bytes = 0, absl::Time now = absl::Now());
  // After it returns, Tick never touches the call.
  void Stop();
  bool expired() const;
  absl::Status ExpiredStatus() const;

  void Tick(absl::Time now) override;

 private:
  absl::Status ExpiredStatusLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An upload below its rate once it has waited `idle_` in all.
  bool TooSlowLocked(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string method_;
  const absl::Duration idle_;
  const int64_t min_upload_bytes_per_second_;
  mutable absl::Mutex mu_;
  grpc::ServerContext* context_ ABSL_GUARDED_BY(mu_);  // null after Stop
  absl::Time waiting_since_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  Wait waiting_for_ ABSL_GUARDED_BY(mu_) = Wait::kRead;  // the last wait begun
  bool expired_ ABSL_GUARDED_BY(mu_) = false;
  bool too_slow_ ABSL_GUARDED_BY(mu_) = false;       // expired by the upload rate
  absl::Duration read_waited_ ABSL_GUARDED_BY(mu_);  // in reads that have returned
  uint64_t read_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// Registers a watch with `ticker` for one handler's lifetime. A null ticker
// watches nothing.
class ScopedStreamIdleWatch {
 public:
  ScopedStreamIdleWatch(StreamTicker* ticker, grpc::ServerContext* context,
                        absl::string_view method, absl::Duration idle,
                        int64_t min_upload_bytes_per_second = 0);
  ~ScopedStreamIdleWatch();
  ScopedStreamIdleWatch(const ScopedStreamIdleWatch&) = delete;
  ScopedStreamIdleWatch& operator=(const ScopedStreamIdleWatch&) = delete;

  // `status`, or DEADLINE_EXCEEDED if the watch ended the call.
  absl::Status Outcome(absl::Status status) const;
  // Reads one message through `reader`, counting the wait as idle time.
  template <typename Reader, typename Message>
  bool Read(Reader* reader, Message* message) {
    if (watch_ != nullptr) watch_->BeginWait(StreamIdleWatch::Wait::kRead);
    const bool ok = reader->Read(message);
    if (watch_ != nullptr) watch_->EndWait(ok ? message->ByteSizeLong() : 0);
    return ok;
  }
  // Writes one message through `writer`, counting a write held by flow
  // control (the client is not reading) as idle time.
  template <typename Writer, typename Message>
  bool Write(Writer* writer, const Message& message) {
    if (watch_ != nullptr) watch_->BeginWait(StreamIdleWatch::Wait::kWrite);
    const bool ok = writer->Write(message);
    if (watch_ != nullptr) watch_->EndWait();
    return ok;
  }

 private:
  StreamTicker* const ticker_;
  std::shared_ptr<StreamIdleWatch> watch_;
};

// A stream (reader, writer or both) whose Read and Write go through a
// watch: hand it to code templated on the stream.
template <typename Stream>
class WatchedStream {
 public:
  WatchedStream(Stream* stream, ScopedStreamIdleWatch* watch) : stream_(stream), watch_(watch) {}
  template <typename Message>
  bool Read(Message* message) {
    return watch_->Read(stream_, message);
  }
  template <typename Message>
  bool Write(const Message& message) {
    return watch_->Write(stream_, message);
  }

 private:
  Stream* const stream_;
  ScopedStreamIdleWatch* const watch_;
};

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_STREAM_IDLE_WATCH_H_
