// File: status/recent_events.h
//
// RecentEvents: the last faults and resets of the pod, for the status page
// ("recent faults and resets"). A bounded ring: the newest `capacity`
// events are kept, older ones dropped, so memory is fixed whatever happens
// to the pod. Nothing here is durable: the audit log (docs/operations.md)
// is the record of who did what; this is the live view.
//
// Thread safety: every method is safe to call concurrently. Record is
// cheap and never blocks on anything but its own short mutex, so it may
// be called from the scheduler's event callbacks (with the scheduler's
// mutex held: lock order scheduler, then RecentEvents).
#ifndef IPUPOD_STATUS_RECENT_EVENTS_H_
#define IPUPOD_STATUS_RECENT_EVENTS_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ipupod::status {

struct PodEvent {
  int64_t time_unix_ms = 0;
  std::string kind;    // "fault" or "reset"
  std::string what;    // "ipu-reset", "unrecoverable", ...; "ipu", "partition", "pod" for resets
  std::string origin;  // "injected", "random", or the user who reset
  std::string target;  // "IPU 4", "partition exp1", "pod"
  std::vector<int> ipus;
  std::vector<std::string> sessions;  // the sessions it reached
};

class RecentEvents {
 public:
  static constexpr size_t kDefaultCapacity = 100;

  explicit RecentEvents(size_t capacity = kDefaultCapacity) : capacity_(capacity) {}
  RecentEvents(const RecentEvents&) = delete;
  RecentEvents& operator=(const RecentEvents&) = delete;

  void Record(PodEvent event);
  // Newest first.
  std::vector<PodEvent> Snapshot() const;
  // Every event recorded since the start, dropped ones included.
  int64_t total() const;

 private:
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<PodEvent> events_ ABSL_GUARDED_BY(mu_);  // oldest first
  int64_t total_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ipupod::status

#endif  // IPUPOD_STATUS_RECENT_EVENTS_H_
