// File: server/status/recent_events.h
//
// RecentEvents: the last faults and resets of the pod, for the status page
// ("recent faults and resets"). A bounded ring: the newest `capacity`
// events are kept, older ones dropped, so memory is fixed whatever happens
// to the pod. Nothing here is durable: the audit log (docs/operations.md)
// is the record of who did what; this is the live view.
//
// It is the scheduler's PodEventObserver for faults, resets and repairs
// (SchedulerOptions::events, through a PodEventFanout beside the metrics):
// each becomes one PodEvent.
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
#include "scheduler/pod_events.h"

namespace ipupod::status {

struct PodEvent {
  int64_t time_unix_ms = 0;
  std::string kind;    // "fault", "reset" or "repair"
  std::string what;    // faults: "ipu-reset", "unrecoverable", ...; resets: "ipu", "partition",
                       // "pod"; repairs: "failed IPU"
  std::string origin;  // faults: the admin who injected it or "random"; resets: "requested" or
                       // "automatic" (after a session ended on errored IPUs); repairs: the admin
  std::string target;  // "IPU 4", "partition exp1", "pod"
  std::vector<int> ipus;
  std::vector<std::string> sessions;  // the sessions it reached
};

class RecentEvents final : public scheduler::PodEventObserver {
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

  // scheduler::PodEventObserver: faults, resets and repairs are recorded.
  void OnFault(const scheduler::FaultEvent& event) override;
  void OnResetStarted(const scheduler::ResetEvent& event) override;
  void OnRepaired(const scheduler::RepairEvent& event) override;

 private:
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<PodEvent> events_ ABSL_GUARDED_BY(mu_);  // oldest first
  int64_t total_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ipupod::status

#endif  // IPUPOD_STATUS_RECENT_EVENTS_H_
