// File: tools/replay/driver.h
//
// Replays a selection of a trace through the real Scheduler
// (scheduler::Scheduler::Create, the code ipupodd runs) on a VirtualClock.
// Each job is an attach request: its user and account are its cluster,
// wait = true, its IPUs, a time limit of its duration x estimate_factor, and
// the client label "trace job LINE". When the scheduler grants it
// (AttachObserver::OnGranted, which only records), the driver schedules its
// end at start + duration and Releases it then. Nothing else touches the
// scheduler, so its decisions are exactly a live server's for the same
// requests at the same times.
//
// Events run in time order. At one instant the rule is fixed: ends first
// (in the order the jobs started), then submissions (in trace order), so
// jobs arriving at an instant find the IPUs freed at that instant. Each
// Release and Attach is a separate call, as separate clients' would be.
// After each instant the driver calls Scheduler::Reprioritize (usage charged,
// priorities recomputed, the queue walked), and while anyone waits it makes
// such a pass at least every priority_interval of virtual time: the live
// server's periodic pass (its own timer is off: priority_interval zero).
//
// Thread safety: Replay is a pure function of its inputs (the scheduler's
// own timer thread runs no work: no timeouts, no resets, no faults).
// Errors: INVALID_ARGUMENT for bad options (an unknown pod size, shares
// not > 0 or naming a cluster outside the selection, a negative or
// non-finite estimate factor); the scheduler's error, naming the job, if
// it refuses a request (INTERNAL if a job ends other than by its release).
#ifndef IPUPOD_REPLAY_DRIVER_H_
#define IPUPOD_REPLAY_DRIVER_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "device/pod_config.h"
#include "scheduler/scheduler.h"
#include "scheduler/sharing/policy.h"
#include "tools/replay/metrics.h"
#include "tools/replay/selection.h"

namespace ipupod::replay {

struct ReplayOptions {
  device::PodConfig pod = {"POD64", 64, &device::kGc200};
  sharing::QueueOrder order = sharing::QueueOrder::kMultifactor;
  // Accounts: one per cluster of the selection, its user the cluster, with
  // these shares (a cluster not named has 1). With `configure_accounts`
  // false, none are configured (a server without a "sharing" section): each
  // user, i.e. cluster, is an account of its own with one share, and the
  // requests name no account; `shares` must then be empty.
  std::map<std::string, double> shares;
  bool configure_accounts = true;
  // A job's time limit is its duration x this (1 = perfect estimates); 0
  // gives none, like an interactive attach without a QoS wall time.
  double estimate_factor = 1;
  // While anyone waits, Scheduler::Reprioritize runs at least this often on
  // the virtual clock (besides after every instant with events), as the live
  // server's periodic pass does; zero = only after events.
  absl::Duration priority_interval = absl::Seconds(60);
  // SchedulerOptions::max_backfill_waiters (0 = no bound): how far past the
  // first waiter that cannot start a walk of the queue looks.
  int max_backfill_waiters = scheduler::SchedulerOptions().max_backfill_waiters;
  // The rest of the policy (weights, half-life, QoS); its order and accounts
  // are replaced by the fields above.
  sharing::SharingPolicy policy = sharing::DefaultPolicy();
};

// The policy the scheduler gets for `selection` under `options` (what
// Replay uses; the live check gives the same to ipupodd).
absl::StatusOr<sharing::SharingPolicy> ReplayPolicy(const Selection& selection,
                                                    const ReplayOptions& options);

absl::StatusOr<PolicyRun> Replay(const Selection& selection, const ReplayOptions& options);

}  // namespace ipupod::replay

#endif  // IPUPOD_REPLAY_DRIVER_H_
