// File: scheduler/pod_events.h
//
// PodEventObserver: what happens to the pod, as it happens - grants, ends
// of sessions, faults, resets, repairs - for whoever keeps a record of it:
// the metrics' counters (server/metrics/pod_metrics.h), a status page's recent
// faults and resets. The Scheduler calls the one observer in
// SchedulerOptions::events (null = none); PodEventFanout hands each event to
// several.
//
// Calls run with the Scheduler's mutex held, exactly as AttachObserver's
// (scheduler.h): in the order the events happened, on the thread whose call
// made them. An observer must therefore be quick and must not block: bump a
// counter, append to a bounded buffer under a leaf lock. It must not call
// back into the Scheduler (lock order: the Scheduler's mutex, then the
// observer's). The events are passed by reference and live only during the
// call: copy what is kept.
//
// Thread safety: an observer is called from many threads (never two at once
// for one Scheduler, since its mutex is held) and must outlive the
// Scheduler. PodEventFanout is immutable after construction.
#ifndef IPUPOD_SCHEDULER_POD_EVENTS_H_
#define IPUPOD_SCHEDULER_POD_EVENTS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/errors.h"
#include "scheduler/scheduler.h"

namespace ipupod::scheduler {

// "ipu-reset", "link-reset", "partition-reset", "full-reset", "unrecoverable":
// the names of the config's random_faults.kinds.
absl::string_view FaultKindName(FaultKind kind);

// A request got its IPUs (at once, or after waiting in the queue).
struct GrantEvent {
  std::string session;
  std::string user;
  std::string account;
  std::string qos;
  std::string job;  // "" for an interactive session
  int ipus = 0;     // granted, auto-round extras included
  double waited_seconds = 0;
  int64_t at_unix_ms = 0;
};

// A session ended, for any reason.
struct SessionEndEvent {
  std::string session;
  std::string user;
  std::string account;
  std::string qos;
  std::string job;
  int ipus = 0;
  double ipu_seconds = 0;  // ipus x held time: what its usage record is charged
  std::string end_state;   // scheduler/accounting/ledger.h: RELEASED, DETACHED, PREEMPTED, ...
  int64_t at_unix_ms = 0;
};

// A fault struck an IPU: injected by an admin, or drawn by random_faults.
struct FaultEvent {
  int ipu = 0;
  FaultKind kind;
  bool random = false;
  std::vector<int> affected_ipus;
  std::vector<std::string> affected_sessions;
  std::string by;  // the admin who injected it; "" for a random one
  int64_t at_unix_ms = 0;
};

// A reset began (its IPUs are `resetting` until it ends).
struct ResetEvent {
  RecoveryAction level = RecoveryAction::kIpuReset;  // kIpuReset, kPartitionReset, kFullReset
  bool automatic = false;  // after a session ended on errored IPUs (V-IPU's auto-reset)
  std::vector<int> ipus;
  std::vector<std::string> sessions;
  double simulated_seconds = 0;
  int64_t at_unix_ms = 0;
};

// A failed IPU was repaired by an admin.
struct RepairEvent {
  int ipu = 0;
  std::string by;
  int64_t at_unix_ms = 0;
};

class PodEventObserver {
 public:
  virtual ~PodEventObserver() = default;
  virtual void OnGranted(const GrantEvent& event) {}
  virtual void OnSessionEnded(const SessionEndEvent& event) {}
  virtual void OnFault(const FaultEvent& event) {}
  virtual void OnResetStarted(const ResetEvent& event) {}
  virtual void OnRepaired(const RepairEvent& event) {}
};

// Hands every event to each observer, in the given order. The observers
// must outlive it.
class PodEventFanout final : public PodEventObserver {
 public:
  explicit PodEventFanout(std::vector<PodEventObserver*> observers)
      : observers_(std::move(observers)) {}

  void OnGranted(const GrantEvent& event) override {
    for (PodEventObserver* o : observers_) o->OnGranted(event);
  }
  void OnSessionEnded(const SessionEndEvent& event) override {
    for (PodEventObserver* o : observers_) o->OnSessionEnded(event);
  }
  void OnFault(const FaultEvent& event) override {
    for (PodEventObserver* o : observers_) o->OnFault(event);
  }
  void OnResetStarted(const ResetEvent& event) override {
    for (PodEventObserver* o : observers_) o->OnResetStarted(event);
  }
  void OnRepaired(const RepairEvent& event) override {
    for (PodEventObserver* o : observers_) o->OnRepaired(event);
  }

 private:
  const std::vector<PodEventObserver*> observers_;
};

}  // namespace ipupod::scheduler

#endif  // IPUPOD_SCHEDULER_POD_EVENTS_H_
