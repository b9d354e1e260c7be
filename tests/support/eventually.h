// File: tests/support/eventually.h
//
// test_support::Eventually: polls a condition until it holds or a deadline
// passes. Tests never sleep for a fixed time to wait for something; they
// poll with a deadline, so a fast machine is fast and a slow one still
// passes.
//
// Thread safety: calls `predicate` on the calling thread only.
// Errors: none; returns whether the condition held (checked once more at
// the deadline).
#ifndef IPUPOD_TESTS_SUPPORT_EVENTUALLY_H_
#define IPUPOD_TESTS_SUPPORT_EVENTUALLY_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ipupod::test_support {

inline constexpr absl::Duration kEventuallyTimeout = absl::Seconds(10);
inline constexpr absl::Duration kEventuallyPoll = absl::Milliseconds(5);

template <typename Predicate>
bool Eventually(Predicate&& predicate, absl::Duration timeout = kEventuallyTimeout,
                absl::Duration poll = kEventuallyPoll) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (predicate()) return true;
    absl::SleepFor(poll);
  }
  return predicate();
}

}  // namespace ipupod::test_support

#endif  // IPUPOD_TESTS_SUPPORT_EVENTUALLY_H_
