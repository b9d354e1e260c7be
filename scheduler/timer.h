// File: scheduler/timer.h
//
// One background thread that runs callbacks at their deadlines: attach wait
// timeouts and the end of simulated resets. The pending queue is ordered by
// deadline (ties in scheduling order) and bounded by `max_pending`.
//
// Callbacks run on the timer thread without the timer's lock held, so they
// may take other locks and call Schedule/Cancel. Lock order: a caller may hold
// its own lock while calling Schedule/Cancel (owner lock before timer lock).
// Every wait of the thread is bounded (at most kMaxIdleWait), so Stop is
// noticed even without a notification.
//
// Thread safety: all methods are safe to call concurrently.
// Errors: Schedule returns RESOURCE_EXHAUSTED when max_pending callbacks are
// pending, UNAVAILABLE after Stop.
#ifndef IPUPOD_SCHEDULER_TIMER_H_
#define IPUPOD_SCHEDULER_TIMER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/sync.h"

namespace ipupod::scheduler {

class Timer {
 public:
  using Callback = std::function<void()>;
  static constexpr absl::Duration kMaxIdleWait = absl::Milliseconds(500);

  using Clock = std::function<absl::Time()>;
  // Starts the thread. Deadlines are read on `clock` (empty = absl::Now);
  // between checks the thread sleeps at most kMaxIdleWait of wall time.
  // REQUIRES: max_pending >= 1.
  explicit Timer(size_t max_pending, Clock clock = nullptr);
  // Stops (see Stop).
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  // Runs `fn` once, `delay` from now (at once for a non-positive delay).
  // Returns an id for Cancel (never 0).
  absl::StatusOr<uint64_t> Schedule(absl::Duration delay, Callback fn);
  // Drops a pending callback. False when it already ran, is running, or is unknown.
  bool Cancel(uint64_t id);
  // Drops every pending callback, waits for a running one to return and
  // joins the thread. Idempotent. From a callback it does not wait (the
  // thread ends when the callback returns). REQUIRES: the Timer is not
  // destroyed from one of its own callbacks.
  void Stop();
  size_t pending() const;

 private:
  using Key = std::pair<absl::Time, uint64_t>;  // deadline, id
  void Run();
  // Pops the first due callback, or waits (bounded) for one. Returns an empty
  // callback when nothing is due yet or the timer stopped.
  Callback NextDue() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_pending_;
  const Clock clock_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  std::map<Key, Callback> queue_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, absl::Time> deadlines_ ABSL_GUARDED_BY(mu_);  // id -> deadline
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex join_mu_;  // serialises Stop's join
  std::thread thread_;
  std::thread::id thread_id_;  // set once in the constructor
};

}  // namespace ipupod::scheduler

#endif  // IPUPOD_SCHEDULER_TIMER_H_
