// File: scheduler/scheduler.h
//
// The Scheduler owns the simulated pod: its IPUs (device::Ipu), partitions,
// sessions and the attach wait queue. It is the single source of truth; the
// gRPC layer (server/) only translates requests and delivers events.
//
// Policy (docs/scheduling.md):
//   * Partitions and grants are aligned power-of-two blocks (buddy style).
//   * Attach is exclusive: an IPU is in at most one session.
//   * The wait queue is first come, first served with conservative backfill:
//     each waiter, in order, reserves the block it will get first; a later
//     request is granted only on IPUs outside every earlier reservation, so
//     it can never delay anyone ahead of it. A request without `wait` is
//     treated as a waiter at the tail: it never takes a reserved IPU.
//   * A request larger than its pool (pod or partition) fails at once.
//
// Errors: every method returns absl::Status with the gRPC-compatible code the
// client sees (INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED,
// RESOURCE_EXHAUSTED, FAILED_PRECONDITION, DEADLINE_EXCEEDED, ABORTED, ...),
// and device errors carry common/errors.h payloads. A failed call changes
// nothing.
//
// Thread safety: every public method is safe to call concurrently. One mutex
// guards all state. AttachObserver callbacks run with that mutex held, so an
// observer must not block and must not call back into the Scheduler from the
// callback (lock order: Scheduler::mu_ before any observer lock).
// SchedulerOptions::on_session_ended runs WITHOUT that mutex (see there).
//
// Session operations (ExecutionService): BeginSessionOperation /
// EndSessionOperation bracket one load, weight transfer or run; RecordLoad
// charges device memory. Every session has a load generation that changes
// with each load and each event that clears its IPUs (any reset reaching
// one of them, an unrecoverable fault, a repair): those also free the
// memory charged on every IPU of the session and set needs_load. A
// detach frees memory too (device::Ipu::Detach).
#ifndef IPUPOD_SCHEDULER_SCHEDULER_H_
#define IPUPOD_SCHEDULER_SCHEDULER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/errors.h"
#include "device/device_ids.h"
#include "device/ipu.h"
#include "device/pod_config.h"
#include "scheduler/sharing/policy.h"
#include "scheduler/sharing/priority.h"

namespace ipupod::accounting {
class Ledger;
}

namespace ipupod::scheduler {

class StateStore;
class PodEventObserver;  // scheduler/pod_events.h

// Who is calling; established by server/ from the token or the open-mode name.
struct Caller {
  std::string user;
  bool admin = false;
};

enum class FaultKind { kIpuReset, kLinkReset, kPartitionReset, kFullReset, kUnrecoverable };

// Seeded random faults for chaos testing: each session operation draws once;
// with `probability_per_operation` one IPU of the session suffers a fault of a
// kind drawn uniformly from `kinds`. Same seed and same operation order give
// the same faults.
struct RandomFaults {
  uint64_t seed = 0;
  double probability_per_operation = 0.0;
  std::vector<FaultKind> kinds = {FaultKind::kIpuReset};
};

struct SchedulerOptions {
  device::PodConfig pod;
  // Wall time a reset keeps IPUs in kResetting (the simulated duration is
  // reported separately; see docs/design.md).
  absl::Duration ipu_reset_time = absl::Milliseconds(200);
  absl::Duration partition_reset_time = absl::Milliseconds(500);
  absl::Duration pod_reset_time = absl::Seconds(1);
  // Bound on queued attach requests; more get RESOURCE_EXHAUSTED.
  int max_waiters = 4096;
  // Bounds on partitions and names (bad input is refused, never stored).
  int max_partitions = 256;
  int max_name_length = 64;
  RandomFaults random_faults;
  // The clock for timestamps, waits and timeouts; empty = absl::Now. A test or
  // a replay driver may supply its own (the timer re-reads it at least every
  // 500 ms of wall time, so a clock that jumps ahead fires due work promptly).
  std::function<absl::Time()> clock;
  // Called once with the id of every session that ends (released, detached,
  // its partition force-removed, shut down), after the Scheduler's mutex is
  // released, on the thread whose call ended it. It may run concurrently
  // for different sessions and may call the Scheduler. Empty = none.
  std::function<void(const std::string& session)> on_session_ended;
  // The sharing policy in force (accounts, QoS, limits, priority weights,
  // queue order); null = sharing::DefaultPolicy(). Replace with SetPolicy.
  std::shared_ptr<const sharing::SharingPolicy> policy;
  // Where sessions' usage records go (scheduler/accounting/ledger.h); null = nowhere.
  // Read at Create to rebuild decayed usage; written after each grant and
  // each end, outside the Scheduler's mutex. Must outlive the Scheduler.
  accounting::Ledger* ledger = nullptr;
  // Priorities change as requests age and usage decays: the queue is
  // re-ordered and walked at least this often while anyone waits (zero =
  // only on events and Reprioritize(); ipupod-replay drives it itself).
  absl::Duration priority_interval = absl::Seconds(30);
  // Told of grants, session ends, faults, resets and repairs as they happen
  // (scheduler/pod_events.h), with the Scheduler's mutex held, as
  // AttachObserver is: it must only record (bump a counter, append to a
  // bounded buffer) and never call back. Null = nobody. Must outlive the
  // Scheduler.
  PodEventObserver* events = nullptr;
  // Bound on the walk (Slurm's bf_max_job_test): past the first waiter that
  // cannot start, a walk of the queue considers at most this many waiters;
  // those further back neither start nor reserve in that walk and keep the
  // reason a walk last gave them. 0 = no bound. Besides, a walk stops where
  // no waiter further back could start (docs/scheduling.md, "Speed").
  int max_backfill_waiters = 1000;
  // Check the pod's invariants (CheckInvariants in scheduler_impl.h) after
  // every change to its state, in every build, aborting on a breach; builds
  // with IPUPOD_DCHECK on (common/check.h) always do. Each check walks the
  // pod, its sessions and its queue: for soak runs and debugging.
  bool check_invariants = false;
};

// ---- Read-only snapshots, copied out under the lock.

struct IpuView {
  int id = 0;
  device::IpuState state = device::IpuState::kIdle;
  RecoveryAction recovery_action = RecoveryAction::kNone;
  std::string partition;
  std::string session;
  std::string owner;
  uint64_t memory_used_bytes = 0;
  uint64_t memory_total_bytes = 0;
  std::string failure_reason;
};

struct PartitionView {
  std::string name;
  device::Block block;
  int device_id = 0;
  std::string owner;
  int64_t created_unix_ms = 0;
  std::vector<std::string> sessions;
};

struct SessionView {
  std::string id;
  std::string user;
  std::vector<int> ipus;  // all granted IPUs (block order)
  int device_id = 0;
  int requested_ipus = 0;
  std::vector<int> idle_ipus;  // auto-round extras
  std::string partition;
  int64_t attached_unix_ms = 0;
  std::string client;
  bool needs_load = false;
  std::string account;
  std::string qos;
  std::string job;  // the batch job it runs, "" for an interactive session
  // When the session is expected to end (its time limit, or its QoS's
  // maximum wall time); 0 = not known.
  int64_t expected_end_unix_ms = 0;
  // How long the request waited, and how much of that it was blocked by
  // fragmentation alone (enough free IPUs, no aligned block).
  double waited_seconds = 0;
  double fragmentation_delay_seconds = 0;
};

struct QueueEntryView {
  std::string ticket;
  int position = 0;  // 1-based
  std::string user;
  int num_ipus = 0;
  std::string partition;
  double waited_seconds = 0;
  double timeout_seconds = 0;
  std::string client;
  std::string account;
  std::string qos;
  std::string job;
  double priority = 0;
  sharing::Factors factors;
  // Why it waits, Slurm style: "Priority" (others go first), "Resources"
  // (not enough IPUs free), "Fragmentation" (enough free IPUs, no aligned
  // block), or the limit that holds it ("QosMaxIpusPerUser", ...).
  std::string reason;
  // Seconds it has so far been blocked by fragmentation alone.
  double fragmentation_delay_seconds = 0;
  // When its reserved block is expected to be free; 0 = not known.
  int64_t expected_start_unix_ms = 0;
};

// Where a waiter stands: its QueueEntryView's ticket, position and reason.
struct QueuePlaceView {
  std::string ticket;
  int position = 0;  // 1-based
  std::string reason;
};

// One account's share and usage, like sshare.
struct ShareView {
  std::string account;
  std::vector<std::string> users;  // members (the user itself for per-user accounts)
  double shares = 0;
  double shares_fraction = 0;    // S
  double usage_ipu_seconds = 0;  // decayed
  double usage_fraction = 0;     // U
  double fair_share_factor = 0;
  int ipus_held = 0;
  double window_ipu_hours = 0;  // used in the rolling window (limits)
};

// What a preempted session is told.
struct PreemptionView {
  std::string session;
  std::string by_user;  // whose request needs the IPUs
  std::string by_qos;
  int64_t deadline_unix_ms = 0;
  double grace_seconds = 0;
  std::string message;  // "preempted for bob's request (QoS normal) ..."
};

struct QueuePositionView {
  std::string ticket;
  int position = 0;
  int queue_length = 0;
  std::vector<std::string> blocking_sessions;
};

struct PodView {
  std::string name;
  int num_ipus = 0;
  int free_ipus = 0;
  int failed_ipus = 0;
  int waiting = 0;
  std::vector<IpuView> ipus;
  std::vector<PartitionView> partitions;
  std::vector<SessionView> sessions;
};

// A session's or waiter's client label ("host pid 42: python") says what
// its owner runs; only the owner and admins see it. Others get "".
bool MaySeeClientLabel(const Caller& caller, absl::string_view owner);
// Clears every label in `pod` / `queue` that `caller` may not see.
void HideClientLabels(const Caller& caller, PodView& pod);
void HideClientLabels(const Caller& caller, std::vector<QueueEntryView>& queue);

struct FaultResult {
  std::vector<int> affected_ipus;
  std::vector<std::string> affected_sessions;
};

struct ResetResult {
  std::vector<int> reset_ipus;
  std::vector<std::string> affected_sessions;
  double simulated_seconds = 0;
};

// ---- Attach

struct AttachRequest {
  int64_t num_ipus = 0;
  std::string partition;  // "" = free pool
  bool wait = false;
  absl::Duration wait_timeout = absl::ZeroDuration();  // zero = no limit
  bool auto_round = false;
  std::string client;
  // "" = the caller's default account / the policy's default QoS.
  std::string account;
  std::string qos;
  // How long the session will hold its IPUs at most (a batch job's time
  // limit); zero = its QoS's max_wall or unknown. Backfill uses it.
  absl::Duration time_limit = absl::ZeroDuration();
  // The batch job this attach runs ("" = interactive); counts against the
  // jobs-running limits and marks its usage record.
  std::string job;
  // When the request was first made, if before now (a job queued again after
  // a restart or a requeue keeps its age); InfinitePast = now.
  absl::Time submitted = absl::InfinitePast();
};

// Receives the life of one attach request. Implemented by the server's attach
// stream. Called with the Scheduler's mutex held (see the file comment).
class AttachObserver {
 public:
  virtual ~AttachObserver() = default;
  // The request's queue position: on entry; then, near the front of the
  // queue, whenever it or the queue's length changes, and further back at
  // the periodic pass if it changed (docs/scheduling.md).
  virtual void OnQueued(const QueuePositionView& position) = 0;
  // The grant; called at most once.
  virtual void OnGranted(const SessionView& session) = 0;
  // The request or session ended for a reason other than Release(): the wait
  // timed out (DEADLINE_EXCEEDED), the session was detached by another call or
  // its partition force-removed (ABORTED), or the scheduler shut down
  // (UNAVAILABLE). Called at most once, and never after Release(). A detach's
  // status names who detached (DetachedBy).
  virtual void OnEnded(const absl::Status& why) = 0;
  // The granted session runs in a preemptible QoS and a request of a higher
  // class needs its IPUs: it should give them back (a job checkpoints and
  // returns to the queue) before `notice.deadline_unix_ms`, when the
  // scheduler ends it with ABORTED (state PREEMPTED). Called at most once
  // per session, with the Scheduler's mutex held. Default: nothing.
  virtual void OnPreempted(const PreemptionView& notice) {}
  // Whether it wants OnQueued at all. One that ignores positions (the trace
  // replay) says no, and the scheduler never works them out for it.
  virtual bool WantsPositions() const { return true; }
};

// The user whose Detach ended a session, read from the ABORTED status
// AttachObserver::OnEnded receives; "" for any other end. A holder's own
// detach is an orderly end, not an error (server/attach_stream.cc logs it
// so).
inline constexpr absl::string_view kDetachedByPayload = "ipupod.v1/detached-by";
std::string DetachedBy(const absl::Status& why);

using ResetDone = std::function<void(absl::StatusOr<ResetResult>)>;

// What BeginSessionOperation hands out.
struct SessionOperation {
  SessionView session;
  // Changes with every RecordLoad and every clearing of the session's IPUs
  // (see the file comment); equal generations mean nothing cleared them.
  uint64_t load_generation = 0;
};

class Scheduler {
 public:
  // Loads persisted partitions and failed IPUs from `store` (may be null: no
  // persistence). FAILED_PRECONDITION when the stored state does not fit the
  // configured pod. `store` must outlive the Scheduler.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(SchedulerOptions options,
                                                           StateStore* store);
  virtual ~Scheduler() = default;

  // ---- Pod
  virtual PodView GetPod() const = 0;
  // Admin only. Affected sessions see the error on their next operation.
  virtual absl::StatusOr<FaultResult> InjectFault(const Caller& caller, int ipu,
                                                  FaultKind kind) = 0;
  // Resets complete asynchronously after the configured reset time; `done`
  // runs exactly once (possibly before the call returns, on error) without
  // the Scheduler's mutex held. Who may reset: the IPU's session owner, its
  // partition owner, anyone for an unowned IPU, or an admin.
  virtual void ResetIpu(const Caller& caller, int ipu, ResetDone done) = 0;
  virtual void ResetPartition(const Caller& caller, absl::string_view name, ResetDone done) = 0;
  virtual void ResetSession(const Caller& caller, absl::string_view session, ResetDone done) = 0;
  virtual void ResetPod(const Caller& caller, ResetDone done) = 0;  // admin
  // Admin: kFailed -> back in service.
  virtual absl::StatusOr<IpuView> RepairIpu(const Caller& caller, int ipu) = 0;

  // ---- Partitions
  virtual absl::StatusOr<PartitionView> CreatePartition(const Caller& caller,
                                                        absl::string_view name, int64_t size) = 0;
  virtual absl::StatusOr<PartitionView> GetPartition(absl::string_view name) const = 0;
  virtual std::vector<PartitionView> ListPartitions() const = 0;
  // Returns the sessions it detached (only with `force`).
  virtual absl::StatusOr<std::vector<std::string>> RemovePartition(const Caller& caller,
                                                                   absl::string_view name,
                                                                   bool force) = 0;

  // ---- Sessions
  // Validates and either grants at once, queues (wait), or fails. On success
  // returns the ticket that names this request for Release(); the observer
  // has already received OnGranted or OnQueued when this returns.
  virtual absl::StatusOr<std::string> Attach(const Caller& caller, const AttachRequest& request,
                                             std::shared_ptr<AttachObserver> observer) = 0;
  // The client behind `ticket` went away: leave the queue, or end the
  // session and free its IPUs. Idempotent; unknown tickets are ignored.
  virtual void Release(absl::string_view ticket) = 0;
  // Ends a session by id (its owner or an admin); its observer gets OnEnded
  // with ABORTED. Returns the released IPUs.
  virtual absl::StatusOr<std::vector<int>> Detach(const Caller& caller,
                                                  absl::string_view session) = 0;
  // The session's state; its device error if an IPU of it is faulted,
  // resetting (UNAVAILABLE) or failed. Counts as an operation (random faults).
  virtual absl::StatusOr<SessionView> GetSession(const Caller& caller,
                                                 absl::string_view session) = 0;
  // In the order the queue walk takes them (priority order under the
  // multifactor policy), positions 1..n.
  std::vector<QueueEntryView> ListQueue() const { return ListQueue(0, nullptr); }
  // Its first `limit` entries (0 = all), and in `total` (if not null) how
  // many wait: a listing of a long queue that shows its head.
  virtual std::vector<QueueEntryView> ListQueue(size_t limit, int* total) const = 0;
  // ListQueue's tickets, positions and reasons alone (what a job's view
  // needs): no priorities, no walk for expected starts.
  virtual std::vector<QueuePlaceView> QueuePlaces() const = 0;
  // The place of one waiter, without listing the others; nullopt if it
  // does not wait.
  virtual std::optional<QueuePlaceView> QueuePlaceOf(absl::string_view ticket) const = 0;

  // ---- Sharing
  // Every account with configured shares or recent usage, by name.
  virtual std::vector<ShareView> GetShares() const = 0;
  virtual std::shared_ptr<const sharing::SharingPolicy> policy() const = 0;
  // Replaces the policy in force (SIGHUP). INVALID_ARGUMENT (the old policy
  // stays) if it does not validate. Sessions keep running; waiters keep
  // their account and QoS, and are re-ordered under the new weights.
  virtual absl::Status SetPolicy(std::shared_ptr<const sharing::SharingPolicy> policy) = 0;
  // Charges running sessions' usage up to now, recomputes every waiter's
  // priority and walks the queue. The periodic pass (priority_interval)
  // calls it; a replay driver calls it after moving its clock. In arrival
  // order without IPU-hour limits nothing changes with time alone, so the
  // walk is skipped.
  virtual void Reprioritize() = 0;

  // ---- Operations on a session's IPUs (server/execution_service.h)
  // Begins one operation: the caller must own the session or be an admin
  // (PERMISSION_DENIED; NOT_FOUND for an unknown session). Draws the random
  // fault (one operation), then checks health exactly as GetSession does
  // (ABORTED / DATA_LOSS with kind and action payloads, UNAVAILABLE while
  // resetting). Marks every IPU of the session busy until
  // EndSessionOperation; UNAVAILABLE if an operation is already running.
  virtual absl::StatusOr<SessionOperation> BeginSessionOperation(const Caller& caller,
                                                                 absl::string_view session) = 0;
  // Ends the operation: busy IPUs back to attached (a faulted or resetting
  // IPU keeps its state). Nothing happens if the session has ended.
  virtual void EndSessionOperation(absl::string_view session) = 0;
  // Records a load by the operation that began with `load_generation`:
  // charges bytes_per_ipu[i] on the session's i-th IPU (block order;
  // replacing whatever was charged), clears needs_load and returns the new
  // load generation. All-or-nothing. Errors: NOT_FOUND (the session ended),
  // ABORTED (its IPUs were cleared since the operation began: load again),
  // INVALID_ARGUMENT (not one entry per IPU of the session),
  // RESOURCE_EXHAUSTED naming the IPU, the bytes needed and the bytes it has.
  virtual absl::StatusOr<uint64_t> RecordLoad(absl::string_view session, uint64_t load_generation,
                                              const std::vector<uint64_t>& bytes_per_ipu) = 0;

  // Ends every request and session (observers get UNAVAILABLE) and stops the
  // timer thread. Idempotent; later calls fail with UNAVAILABLE.
  virtual void Shutdown() = 0;
};

}  // namespace ipupod::scheduler

#endif  // IPUPOD_SCHEDULER_SCHEDULER_H_
