// File: common/sync.h
//
// absl::Mutex, CondVar and Notification as ThreadSanitizer can see them.
//
// Debian's libabsl is not built with TSan, so the lock, unlock and wake-ups
// that happen inside it carry no happens-before edges for TSan, which then
// reports false races on every ABSL_GUARDED_BY member. These helpers add
// explicit __tsan_release / __tsan_acquire annotations on the primitive's
// address around each such operation. Without TSan they compile to the plain
// absl calls. Clang's -Wthread-safety sees them exactly like absl::MutexLock.
//
// Use sync::MutexLock instead of absl::MutexLock, and the wait/notify helpers
// instead of calling CondVar, Mutex::Await and Notification directly.
// Thread safety: as the absl primitives they wrap.
#ifndef IPUPOD_COMMON_SYNC_H_
#define IPUPOD_COMMON_SYNC_H_

#include "absl/base/config.h"
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

#ifdef ABSL_HAVE_THREAD_SANITIZER
#include <sanitizer/tsan_interface.h>
#endif

namespace ipupod::sync {

// Happens-before edges for TSan: Released(x) before a hand-off through x,
// Acquired(x) after it.
inline void Released(const void* addr) {
#ifdef ABSL_HAVE_THREAD_SANITIZER
  __tsan_release(const_cast<void*>(addr));
#else
  (void)addr;
#endif
}
inline void Acquired(const void* addr) {
#ifdef ABSL_HAVE_THREAD_SANITIZER
  __tsan_acquire(const_cast<void*>(addr));
#else
  (void)addr;
#endif
}

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(absl::Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
    Acquired(mu_);
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() {
    Released(mu_);
    mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  absl::Mutex* const mu_;
};

// CondVar waits release and retake `mu` inside libabsl.
inline bool WaitWithDeadline(absl::CondVar* cv, absl::Mutex* mu, absl::Time deadline)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  Released(mu);
  const bool timed_out = cv->WaitWithDeadline(mu, deadline);
  Acquired(mu);
  return timed_out;
}
inline bool WaitWithTimeout(absl::CondVar* cv, absl::Mutex* mu, absl::Duration timeout)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  return WaitWithDeadline(cv, mu, absl::Now() + timeout);
}
// Mutex::AwaitWithTimeout, which also releases and retakes `mu`.
inline bool AwaitWithTimeout(absl::Mutex* mu, const absl::Condition& condition,
                             absl::Duration timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  Released(mu);
  const bool met = mu->AwaitWithTimeout(condition, timeout);
  Acquired(mu);
  return met;
}

inline void Notify(absl::Notification* n) {
  Released(n);
  n->Notify();
}
inline bool WaitForNotificationWithTimeout(absl::Notification* n, absl::Duration timeout) {
  const bool notified = n->WaitForNotificationWithTimeout(timeout);
  if (notified) Acquired(n);
  return notified;
}
inline bool HasBeenNotified(absl::Notification* n) {
  const bool notified = n->HasBeenNotified();
  if (notified) Acquired(n);
  return notified;
}

}  // namespace ipupod::sync

#endif  // IPUPOD_COMMON_SYNC_H_
