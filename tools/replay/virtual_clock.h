// File: tools/replay/virtual_clock.h
//
// The replay's clock: a time that moves only when the driver sets it. It is
// handed to the Scheduler as SchedulerOptions::clock, so the scheduler's
// own timestamps, ages and usage charges follow the trace's time, not the
// wall clock, and the policy code that runs is the live server's.
//
// Thread safety: Now() and Set() are safe from any thread (the scheduler's
// timer thread reads it too); the time is one atomic word.
// Errors: none. Set() never moves the clock back (a replay's events come in
// time order); a smaller time is ignored.
#ifndef IPUPOD_REPLAY_VIRTUAL_CLOCK_H_
#define IPUPOD_REPLAY_VIRTUAL_CLOCK_H_

#include <atomic>
#include <cstdint>
#include <functional>

#include "absl/time/time.h"

namespace ipupod::replay {

class VirtualClock {
 public:
  explicit VirtualClock(absl::Time start) : unix_nanos_(absl::ToUnixNanos(start)) {}
  VirtualClock(const VirtualClock&) = delete;
  VirtualClock& operator=(const VirtualClock&) = delete;

  absl::Time Now() const {
    return absl::FromUnixNanos(unix_nanos_.load(std::memory_order_acquire));
  }
  void Set(absl::Time t) {
    const int64_t nanos = absl::ToUnixNanos(t);
    int64_t seen = unix_nanos_.load(std::memory_order_relaxed);
    while (nanos > seen &&
           !unix_nanos_.compare_exchange_weak(seen, nanos, std::memory_order_release)) {
    }
  }
  // For SchedulerOptions::clock. REQUIRES: the clock outlives the function's users.
  std::function<absl::Time()> AsFunction() const {
    return [this] { return Now(); };
  }

 private:
  std::atomic<int64_t> unix_nanos_;
};

}  // namespace ipupod::replay

#endif  // IPUPOD_REPLAY_VIRTUAL_CLOCK_H_
