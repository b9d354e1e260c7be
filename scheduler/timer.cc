#include "scheduler/timer.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace ipupod::scheduler {

Timer::Timer(size_t max_pending, Clock clock)
    : max_pending_(std::max<size_t>(1, max_pending)),
      clock_(clock ? std::move(clock) : Clock(&absl::Now)),
      thread_([this] { Run(); }) {
  thread_id_ = thread_.get_id();
}

Timer::~Timer() { Stop(); }

absl::StatusOr<uint64_t> Timer::Schedule(absl::Duration delay, Callback fn) {
  sync::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("the timer is stopped");
  if (queue_.size() >= max_pending_) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("too many pending timers (%d); try again later", max_pending_));
  }
  const uint64_t id = next_id_++;
  const absl::Time deadline = clock_() + std::max(delay, absl::ZeroDuration());
  queue_.emplace(Key{deadline, id}, std::move(fn));
  deadlines_.emplace(id, deadline);
  changed_.Signal();
  return id;
}

bool Timer::Cancel(uint64_t id) {
  sync::MutexLock lock(&mu_);
  auto it = deadlines_.find(id);
  if (it == deadlines_.end()) return false;
  queue_.erase(Key{it->second, id});
  deadlines_.erase(it);
  return true;
}

void Timer::Stop() {
  {
    sync::MutexLock lock(&mu_);
    stopping_ = true;
    queue_.clear();
    deadlines_.clear();
    changed_.SignalAll();
  }
  // From a callback: the thread ends when it returns; a later Stop (or the
  // destructor) on another thread joins it.
  if (std::this_thread::get_id() == thread_id_) return;
  sync::MutexLock join(&join_mu_);
  if (thread_.joinable()) thread_.join();
}

size_t Timer::pending() const {
  sync::MutexLock lock(&mu_);
  return queue_.size();
}

void Timer::Run() {
  for (;;) {
    Callback fn;
    {
      sync::MutexLock lock(&mu_);
      if (stopping_) return;
      fn = NextDue();
    }
    if (fn) fn();  // without the lock: callbacks may call Schedule/Cancel
  }
}

Timer::Callback Timer::NextDue() {
  const absl::Time now = clock_();
  if (queue_.empty()) {
    sync::WaitWithTimeout(&changed_, &mu_, kMaxIdleWait);
    return nullptr;
  }
  auto first = queue_.begin();
  if (first->first.first > now) {
    // The wait is in wall time; `now` may come from another clock.
    sync::WaitWithTimeout(&changed_, &mu_, std::min(first->first.first - now, kMaxIdleWait));
    return nullptr;
  }
  Callback fn = std::move(first->second);
  deadlines_.erase(first->first.second);
  queue_.erase(first);
  return fn;
}

}  // namespace ipupod::scheduler
