// File: server/stream_ticker.h
//
// StreamTicker: one server-wide thread that calls Tick() on every registered
// stream each `period` (attach streams send heartbeats and detect stalled
// writes from it), so streams never need a thread or a timer of their own.
//
// Streams are held by weak_ptr: the ticker never keeps one alive, and a
// stream that went away is skipped and forgotten. Tick() runs on the ticker
// thread with no ticker lock held, so it may take the stream's own locks.
//
// Thread safety: Add/Remove/Stop are safe from any thread, including from
// within Tick(). Stop() joins the thread (not from within Tick()).
#ifndef IPUPOD_SERVER_STREAM_TICKER_H_
#define IPUPOD_SERVER_STREAM_TICKER_H_

#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ipupod::server {

class Tickable {
 public:
  virtual ~Tickable() = default;
  virtual void Tick(absl::Time now) = 0;
};

class StreamTicker {
 public:
  // REQUIRES: period > 0.
  explicit StreamTicker(absl::Duration period);
  ~StreamTicker();  // Stop()
  StreamTicker(const StreamTicker&) = delete;
  StreamTicker& operator=(const StreamTicker&) = delete;

  void Add(const std::shared_ptr<Tickable>& stream);
  void Remove(const Tickable* stream);
  // Ends the thread; idempotent. Later Add() calls are ignored.
  void Stop();
  size_t size() const;

 private:
  void Run();

  const absl::Duration period_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<const Tickable*, std::weak_ptr<Tickable>> streams_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_STREAM_TICKER_H_
