// File: scheduler/scheduler_impl.h
//
// The concrete Scheduler (internal; users include scheduler/scheduler.h and
// call Scheduler::Create). Its definitions are split by concern:
//   scheduler.cc   creation, restore, views, the queue pass, shutdown
//   sessions.cc    attach, release, detach, sessions' health
//   partitions.cc  partitions
//   faults.cc      faults, resets, repair, random faults (the pending
//                  resets are a part, ResetBook)
//   operations.cc  session operations and load accounting (ExecutionService)
//   sharing.cc     the sharing policy at work: usage charged, priorities,
//                  limits, shares, the usage ledger's records
//   invariants.cc  the pod's invariants (CheckPodInvariants, MutationLock)
//
// Its state is held in parts that each own their data and invariants and are
// read and tested alone: SessionTable (session_table.h: sessions, their
// tickets, which session holds each IPU), PartitionTable (partition_table.h:
// partitions, which partition each IPU is in), ResetBook (reset_book.h: the
// pending resets, which reset covers each IPU) and WaitQueue (wait_queue.h).
// SchedulerImpl keeps the lock, the IPUs and the orchestration between them;
// CheckPodInvariants states what holds across the parts.
//
// Thread safety: one absl::Mutex (mu_) guards all state; the parts are not
// thread-safe and are only called with it held. Observers are called
// with mu_ held (scheduler.h). ResetDone callbacks and the timer's callbacks
// run without mu_; the timer is only ever called with mu_ held or from its own
// thread (lock order: mu_, then the timer's lock). Ended sessions are queued
// in ended_sessions_ under mu_ and handed to options_.on_session_ended by
// NotifySessionsEnded() after mu_ is released; usage-ledger writes are queued
// the same way (ledger_ops_) and written, in order, under ledger_mu_ (taken
// before mu_, never while holding it).
#ifndef IPUPOD_SCHEDULER_SCHEDULER_IMPL_H_
#define IPUPOD_SCHEDULER_SCHEDULER_IMPL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/sync.h"
#include "device/device_ids.h"
#include "device/ipu.h"
#include "scheduler/accounting/ledger.h"
#include "scheduler/allocator.h"
#include "scheduler/partition_table.h"
#include "scheduler/reset_book.h"
#include "scheduler/scheduler.h"
#include "scheduler/session_table.h"
#include "scheduler/sharing/policy.h"
#include "scheduler/sharing/usage.h"
#include "scheduler/state_store.h"
#include "scheduler/timer.h"
#include "scheduler/wait_queue.h"

namespace ipupod::scheduler {

// Waiters this near the front of the queue are told every change of their
// position or of the queue's length at once; those further back are told
// on entry and by the periodic pass (priority_interval), when it changed. So
// a grant costs at most this many position messages, not one per waiter.
inline constexpr int kPositionsAlwaysSent = 10;

// Usage-ledger operations queued, beyond which a Release waits for its own
// to be written (SchedulerImpl::FlushLedger).
inline constexpr size_t kLedgerBacklogMax = 65536;

// A usage-ledger write queued under mu_ and done after it is released.
struct LedgerOp {
  bool open = false;               // Open(record) or Close(record.id, ...)
  accounting::UsageRecord record;  // for a close: id, end, ipu_seconds, state
};

// IPUs and running jobs held, per limit scope ("user:alice", "account:a",
// "qos:normal", "qos-user:normal/alice").
struct Holdings {
  absl::flat_hash_map<std::string, int> ipus;
  absl::flat_hash_map<std::string, int> jobs;
};

// What one walk of the queue found (scheduler.cc, WalkQueueLocked): the
// waiters it considered, in order, and the plan for each.
struct QueueWalk {
  static constexpr size_t kNone = static_cast<size_t>(-1);
  std::vector<const Waiter*> order;
  BackfillPlan plan;  // per entry of `order`
  // The entry of the request being attached (Attach), kNone if the walk did
  // not reach it; then the limit that holds it ("" = none).
  size_t candidate = kNone;
  std::string candidate_held;
  // It stopped where no one further could start (BackfillWalk::MayStart)
  // rather than at the end of the queue or at the bound.
  bool stopped_early = false;
  IpuMask free;  // allocatable IPUs its grants left
};

// The last walk that recorded waiters' reasons: the reason of a waiter it did
// not reach follows from it (SchedulerImpl::ReasonLocked).
struct RecordedWalk {
  uint64_t id = 0;
  bool stopped_early = false;
  IpuMask free;
};

// An account's part of the priority in one pass: U and S of
// sharing::PriorityInputs, and the fair-share factor they give.
struct AccountFactors {
  double usage_fraction = 0;
  double shares_fraction = 1;
  double fair_share = 1;
};

// What a priority pass computed once for every waiter (sharing.cc): the
// time, the totals, and per account its factors, filled as waiters of the
// account are met.
struct PriorityPass {
  // Names the pass (Waiter::priority_pass); starts at 1, so a waiter's 0
  // never matches.
  uint64_t generation = 1;
  absl::Time at;
  double total_usage = 0;
  double total_shares = 1;
  double max_qos = 0;
  absl::flat_hash_map<std::string, AccountFactors> accounts;
};

// The outcome of starting a reset: an error, a result to deliver at once
// (nothing needed resetting), or nullopt when it completes on the timer.
using ResetStart = absl::StatusOr<std::optional<ResetResult>>;

class SchedulerImpl final : public Scheduler {
 public:
  SchedulerImpl(SchedulerOptions options, StateStore* store, uint64_t boot_id);
  ~SchedulerImpl() override;
  SchedulerImpl(const SchedulerImpl&) = delete;
  SchedulerImpl& operator=(const SchedulerImpl&) = delete;

  // Applies checked stored state (CheckStoredState). Called once, before use.
  void Restore(const StoredState& state);
  // Seeds usage from the ledger's records (at Create, after Restore).
  void LoadUsage(const std::vector<accounting::UsageRecord>& records) ABSL_LOCKS_EXCLUDED(mu_);

  PodView GetPod() const override;
  absl::StatusOr<FaultResult> InjectFault(const Caller& caller, int ipu, FaultKind kind) override;
  void ResetIpu(const Caller& caller, int ipu, ResetDone done) override;
  void ResetPartition(const Caller& caller, absl::string_view name, ResetDone done) override;
  void ResetSession(const Caller& caller, absl::string_view session, ResetDone done) override;
  void ResetPod(const Caller& caller, ResetDone done) override;
  absl::StatusOr<IpuView> RepairIpu(const Caller& caller, int ipu) override;

  absl::StatusOr<PartitionView> CreatePartition(const Caller& caller, absl::string_view name,
                                                int64_t size) override;
  absl::StatusOr<PartitionView> GetPartition(absl::string_view name) const override;
  std::vector<PartitionView> ListPartitions() const override;
  absl::StatusOr<std::vector<std::string>> RemovePartition(const Caller& caller,
                                                           absl::string_view name,
                                                           bool force) override;

  absl::StatusOr<std::string> Attach(const Caller& caller, const AttachRequest& request,
                                     std::shared_ptr<AttachObserver> observer) override;
  void Release(absl::string_view ticket) override;
  absl::StatusOr<std::vector<int>> Detach(const Caller& caller, absl::string_view session) override;
  absl::StatusOr<SessionView> GetSession(const Caller& caller, absl::string_view session) override;
  using Scheduler::ListQueue;
  std::vector<QueueEntryView> ListQueue(size_t limit, int* total) const override;
  std::vector<QueuePlaceView> QueuePlaces() const override;
  std::optional<QueuePlaceView> QueuePlaceOf(absl::string_view ticket) const override;

  absl::StatusOr<SessionOperation> BeginSessionOperation(const Caller& caller,
                                                         absl::string_view session) override;
  void EndSessionOperation(absl::string_view session) override;
  absl::StatusOr<uint64_t> RecordLoad(absl::string_view session, uint64_t load_generation,
                                      const std::vector<uint64_t>& bytes_per_ipu) override;

  std::vector<ShareView> GetShares() const override;
  std::shared_ptr<const sharing::SharingPolicy> policy() const override;
  absl::Status SetPolicy(std::shared_ptr<const sharing::SharingPolicy> policy) override;
  void Reprioritize() override;

  void Shutdown() override;

  // OK, or INTERNAL naming the first broken invariant of the pod's state
  // (CheckPodInvariants). Every mutating call runs it under IPUPOD_DCHECK
  // before it lets go of the lock (MutationLock); tests call it directly.
  absl::Status CheckInvariants() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Takes mu_ like sync::MutexLock and, in builds with IPUPOD_DCHECK on,
  // checks the pod's invariants (CheckInvariants) before releasing it. Public
  // calls that change the pod's state lock with it.
  class ABSL_SCOPED_LOCKABLE MutationLock {
   public:
    // The bodies take and release the lock the annotations name; the
    // analysis cannot follow the pointer, so it is off inside them.
    explicit MutationLock(SchedulerImpl* scheduler)
        ABSL_EXCLUSIVE_LOCK_FUNCTION(scheduler->mu_) ABSL_NO_THREAD_SAFETY_ANALYSIS;
    ~MutationLock() ABSL_UNLOCK_FUNCTION() ABSL_NO_THREAD_SAFETY_ANALYSIS;
    MutationLock(const MutationLock&) = delete;
    MutationLock& operator=(const MutationLock&) = delete;

   private:
    SchedulerImpl* const scheduler_;
  };

  // ---- scheduler.cc: state helpers
  int pod_size() const { return options_.pod.num_ipus; }
  absl::Time Now() const { return options_.clock(); }
  absl::Status CheckRunningLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckIpuId(int ipu) const;
  IpuMask PodMask() const;
  IpuMask AllocatableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  IpuMask HealthyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  IpuMask PartitionedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The pool of a request: the partition's block, or the IPUs in no partition.
  Demand DemandLocked(const std::string& partition, int size) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const Session* SessionOfIpuLocked(int ipu) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // "sessions s1-1 (alice, IPUs 0-7); partitions p1 (bob, IPUs 8-11); IPU 12 failed".
  std::string DescribeOccupancyLocked(const IpuMask& mask, bool with_partitions) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string NextId(absl::string_view prefix, uint64_t* counter) const;

  // ---- scheduler.cc: views
  IpuView IpuViewLocked(int ipu) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  PartitionView PartitionViewLocked(const Partition& partition) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  SessionView SessionViewLocked(const Session& session) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<SessionView> SessionViewsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- scheduler.cc: the queue pass
  // Walks the queue in its order by the last priority pass, with `candidate`
  // (a request not yet queued) at its place. It considers at most
  // max_backfill_waiters behind the first waiter that cannot start, and with
  // `may_stop_early` stops where no one further could start. It stops after
  // `reach` entries: an entry's plan depends only on those ahead of it, so
  // the first `reach` are those of a longer walk (telling positions needs
  // no more; such a walk records no reasons).
  QueueWalk WalkQueueLocked(const Waiter* candidate, bool may_stop_early,
                            size_t reach = QueueWalk::kNone) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The waiter's demand; `pool` is the IPUs in no partition.
  Demand DemandOfLocked(const Waiter& waiter, const IpuMask& pool) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Demand DemandOfLocked(const Waiter& waiter) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How long the waiter holds its IPUs once granted (Demand::duration).
  absl::Duration HoldOfLocked(const Waiter& waiter) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  PlanContext PlanContextLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records why each waiter the walk considered and did not grant waits, and
  // its fragmentation time, before the grants are made; ends the
  // fragmentation time of waiters it did not reach.
  void RecordReasonsLocked(const QueueWalk& walk, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why `waiter` waits, as of the last recorded walk; `holdings` is
  // HoldingsLocked() when the policy has limits, else null; `pool` the IPUs
  // in no partition.
  std::string ReasonLocked(const Waiter& waiter, const Holdings* holdings,
                           const IpuMask& pool) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Grants every waiter the walk can, then sends changed positions. Run after
  // anything that may let a waiter through (IPUs freed, a waiter gone).
  void RunQueueLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every waiter in the walk's order.
  std::vector<const Waiter*> OrderedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells the waiters among the first kPositionsAlwaysSent (all of them with
  // `everyone`) whose position or queue length changed since they were last
  // told. `walk` (may be null) is one of the queue as it is now.
  void NotifyPositionsLocked(const QueueWalk* walk, bool everyone)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends `waiter` its place; `walk` is one of the queue as it is now that
  // reaches `position` if the whole walk would (its entries are the first
  // places of the queue).
  void TellPositionLocked(const Waiter& waiter, int position, const QueueWalk& walk)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The sessions in the block the waiter reserved in `walk` (entry `index`,
  // kNone if not reached), or in its whole pool.
  std::vector<std::string> BlockingSessionsLocked(const QueueWalk& walk, size_t index,
                                                  const Waiter& waiter) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishShutdownLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- sessions.cc
  absl::StatusOr<Demand> CheckAttachLocked(const Caller& caller, const AttachRequest& request) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status NoFitErrorLocked(const AttachRequest& request, const Demand& demand) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues `waiter`; `walk` is the one Attach made with it as the candidate.
  absl::StatusOr<std::string> EnqueueLocked(Waiter waiter, absl::string_view partition,
                                            QueueWalk walk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void GrantLocked(Waiter waiter, const device::Block& block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnWaitTimeout(const std::string& ticket) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status TimeoutErrorLocked(const Waiter& waiter) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends a session: detaches its IPUs and auto-resets their recoverable
  // errors. `why` (if any) goes to its observer. Returns the released IPUs.
  std::vector<int> EndSessionLocked(const std::string& id, const absl::Status* why,
                                    absl::string_view end_state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends a waiter without granting it; `why` goes to its observer.
  void EndWaiterLocked(const std::string& ticket, const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Session*> OwnSessionLocked(const Caller& caller, absl::string_view id,
                                            absl::string_view verb)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SessionHealthLocked(const Session& session) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the queued ledger operations (FlushLedger), then hands every
  // session ended since the last call to on_session_ended.
  void NotifySessionsEnded(bool wait_for_ledger = true) ABSL_LOCKS_EXCLUDED(mu_);
  // Calls NotifySessionsEnded when it leaves scope: declared before a
  // MutexLock on mu_, it runs after the unlock.
  class NotifyEndedOnExit {
   public:
    explicit NotifyEndedOnExit(SchedulerImpl* scheduler, bool wait_for_ledger = true)
        : scheduler_(scheduler), wait_for_ledger_(wait_for_ledger) {}
    ~NotifyEndedOnExit() { scheduler_->NotifySessionsEnded(wait_for_ledger_); }
    NotifyEndedOnExit(const NotifyEndedOnExit&) = delete;
    NotifyEndedOnExit& operator=(const NotifyEndedOnExit&) = delete;

   private:
    SchedulerImpl* const scheduler_;
    const bool wait_for_ledger_;
  };

  // ---- sharing.cc
  // Charges every session's IPU-seconds since its last charge.
  void ChargeUsageLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ChargeLocked(const std::string& user, const std::string& account, const std::string& qos,
                    double ipu_seconds, absl::Time at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ChargeLocked(const std::string& account, const std::vector<std::string>& keys,
                    double ipu_seconds, absl::Time at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The limit scopes a session of `user` in `account` and `qos` is charged to.
  static std::vector<std::string> UsageKeys(const std::string& user, const std::string& account,
                                            const std::string& qos);
  // Charges usage and starts a priority pass at `now` (pass_), then settles
  // the queue's order for it.
  void UpdatePrioritiesLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void BeginPassLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A waiter's factors and priority in the current pass (zero outside the
  // multifactor order), and whether its priority has stopped changing.
  sharing::Factors FactorsLocked(const Waiter& waiter) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double PriorityLocked(const Waiter& waiter) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FactorsLocked without the waiter's cache.
  sharing::Factors ComputeFactorsLocked(const Waiter& waiter) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool SettledLocked(const Waiter& waiter) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double TotalSharesLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An account's factors in the current pass (computed once per pass).
  const AccountFactors& AccountFactorsLocked(const std::string& account) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Holdings HoldingsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the policy sets any limit (else no walk needs holdings).
  bool HasLimitsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The limit that holds `waiter` now ("" = none), given `holdings`.
  std::string HeldByLocked(const Waiter& waiter, const Holdings& holdings, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void AddHolding(Holdings& holdings, const Waiter& waiter);
  // At Attach: the account and QoS of the request, its time limit against
  // the QoS, and a size no limit could ever allow.
  absl::Status AssociateLocked(const Caller& caller, const AttachRequest& request, int size,
                               Waiter& waiter) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RESOURCE_EXHAUSTED for a request without wait that a limit holds.
  absl::Status HeldErrorLocked(const Waiter& waiter, absl::string_view limit) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Time ExpectedEndLocked(const Waiter& waiter, absl::Time granted) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void QueueLedgerOpenLocked(const Session& session) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void QueueLedgerCloseLocked(const Session& session, absl::Time end, absl::string_view state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sees the ledger operations queued so far written, in order, by one
  // writer at a time: the caller becomes the writer when none is at work,
  // else waits for the writer to have written them. The writer writes
  // everything queued, opens then closes, each kind in one durable write,
  // until nothing is left. Without `wait` (Release: a client gone, no one to
  // answer) and while at most kLedgerBacklogMax are queued, it writes nothing
  // and hands them to a write on the timer's thread (or to any waiting call
  // before it): so gRPC's threads never wait for the disk on a client's way
  // out, and a pod that ends and grants sessions by the thousand a second
  // writes them in batches of what queued during the previous write, not one
  // durable write per record. Called without mu_.
  void FlushLedger(bool wait = true) ABSL_LOCKS_EXCLUDED(mu_, ledger_mu_);
  // Arms the timer's write unless armed; false if the timer refused.
  bool ArmLedgerWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FlushLedger's writer. REQUIRES: no writer at work.
  void WriteLedgerLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ledger_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  void WriteLedgerOps(const std::vector<LedgerOp>& ops);
  void ArmPriorityTimerLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- preemption.cc
  // After a walk: the first waiter of a non-preemptible QoS that cannot start
  // and will not soon preempts preemptible sessions on one block of its pool.
  // Returns whether it preempted anyone.
  bool PreemptForLocked(const QueueWalk& walk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether any preemptible session has not been told yet (walks may then
  // not stop early: a waiter further down may preempt it).
  bool AnyPreemptibleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The block of `waiter`'s size whose busy IPUs are all held by preemptible
  // sessions (none outside `blocked`), fewest such IPUs first; nullopt if none.
  std::optional<device::Block> PreemptableBlockLocked(const Waiter& waiter,
                                                      const IpuMask& blocked) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PreemptSessionLocked(Session& session, const Waiter& by) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnPreemptDeadline(const std::string& session) ABSL_LOCKS_EXCLUDED(mu_);
  // An interactive session's time limit: the limit to enforce (zero = none),
  // and the timer's callback that ends the session TIMEOUT.
  absl::Duration WallLimitLocked(const Waiter& waiter) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartWallTimerLocked(Session& session) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnWallLimit(const std::string& session) ABSL_LOCKS_EXCLUDED(mu_);

  // ---- operations.cc
  // The session's IPUs were cleared: frees the memory charged on each, sets
  // needs_load and moves the load generation on.
  void ClearLoadLocked(Session& session) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckLoadFitsLocked(const Session& session,
                                   const std::vector<uint64_t>& bytes_per_ipu) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- partitions.cc
  absl::StatusOr<device::Block> PlacePartitionLocked(absl::string_view name, int size) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<const Partition*> OwnPartitionLocked(const Caller& caller, absl::string_view name,
                                                      absl::string_view verb) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the partition's `sessions` and waiters (ABORTED, naming `by`).
  void EndPartitionUsersLocked(const std::string& partition,
                               const std::vector<std::string>& sessions, absl::string_view by)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ErasePartitionLocked(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- faults.cc
  absl::StatusOr<FaultResult> ApplyFaultLocked(int ipu, FaultKind kind, absl::string_view reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  IpuMask FaultScopeLocked(int ipu, FaultKind kind) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeRandomFaultLocked(const Session& session) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string ClearCommandLocked(int ipu, RecoveryAction action) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckResetIpuLocked(const Caller& caller, int ipu) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks every IPU of `scope` first, then moves them to kResetting and
  // schedules the end. Failed and already-resetting IPUs are skipped.
  ResetStart StartResetLocked(const IpuMask& scope, RecoveryAction level, absl::Duration time,
                              ResetDone* done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AutoResetLocked(const std::vector<int>& ipus) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishReset(uint64_t reset_id) ABSL_LOCKS_EXCLUDED(mu_);

  const SchedulerOptions options_;
  StateStore* const store_;
  const uint64_t boot_id_;

  mutable absl::Mutex mu_;
  std::vector<device::Ipu> ipus_ ABSL_GUARDED_BY(mu_);
  // The parts (their headers state their invariants; CheckPodInvariants
  // those between them).
  PartitionTable partitions_ ABSL_GUARDED_BY(mu_);
  SessionTable sessions_ ABSL_GUARDED_BY(mu_);
  WaitQueue queue_ ABSL_GUARDED_BY(mu_);
  ResetBook resets_ ABSL_GUARDED_BY(mu_);
  // The queue's order: priorities of the current pass (sharing.cc).
  mutable PriorityPass pass_ ABSL_GUARDED_BY(mu_);
  const WalkPriority walk_priority_;
  uint64_t next_walk_ ABSL_GUARDED_BY(mu_) = 1;
  RecordedWalk last_walk_ ABSL_GUARDED_BY(mu_);
  uint64_t next_session_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::string> ended_sessions_ ABSL_GUARDED_BY(mu_);  // for on_session_ended
  std::shared_ptr<const sharing::SharingPolicy> policy_ ABSL_GUARDED_BY(mu_);
  sharing::DecayedUsage decayed_usage_ ABSL_GUARDED_BY(mu_);  // by account
  sharing::WindowUsage window_usage_ ABSL_GUARDED_BY(mu_);    // by limit scope (Holdings)
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
  // Bounded: one open per grant and one close per end not yet written, and
  // a call that grants or ends waits for its writes once more than
  // kLedgerBacklogMax are queued. `ledger_queued_` counts the operations
  // ever queued, `ledger_written_` those written.
  std::vector<LedgerOp> ledger_ops_ ABSL_GUARDED_BY(mu_);
  uint64_t ledger_queued_ ABSL_GUARDED_BY(mu_) = 0;
  bool ledger_write_armed_ ABSL_GUARDED_BY(mu_) = false;  // the timer's write is pending
  absl::Mutex ledger_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  absl::CondVar ledger_cv_;  // signalled when a batch is written or the writer leaves
  bool ledger_writing_ ABSL_GUARDED_BY(ledger_mu_) = false;
  uint64_t ledger_written_ ABSL_GUARDED_BY(ledger_mu_) = 0;

  // Last member: its thread stops (in Shutdown) before the state above dies.
  Timer timer_;
};

// OK, or INTERNAL naming the first broken invariant of the pod's state: each
// part's own (SessionTable, PartitionTable, WaitQueue, ResetBook
// CheckInvariants), and those between them and the IPUs:
//   * an IPU is attached exactly when a session holds it, and allocatable
//     exactly when it is idle and no session holds it (so the free mask is
//     the idle IPUs not held);
//   * an IPU a pending reset covers is kResetting, and while the book is
//     open (until Shutdown) every kResetting IPU is covered by one;
//   * a session's block lies in its partition, or, for the free pool, in no
//     partition; every waiter's partition exists;
//   * no waiter's ticket is also a session's.
// A pure function of its arguments, so a test can feed it a broken state.
absl::Status CheckPodInvariants(const std::vector<device::Ipu>& ipus, const SessionTable& sessions,
                                const PartitionTable& partitions, const WaitQueue& queue,
                                const ResetBook& resets);

// FAILED_PRECONDITION naming every stored partition that overlaps another, is
// misaligned or does not fit `pod`, and every failure outside it.
absl::Status CheckStoredState(const StoredState& state, const device::PodConfig& pod,
                              int max_name_length);

// What a session ending at `end` is charged: its IPUs x the time it held
// them (its usage record's and its SessionEndEvent's ipu_seconds).
double IpuSecondsOf(const Session& session, absl::Time end);

// "s1-1 (alice)" for each session id in `ids`, joined by ", ".
std::string JoinSessions(const std::vector<const Session*>& sessions);

}  // namespace ipupod::scheduler

#endif  // IPUPOD_SCHEDULER_SCHEDULER_IMPL_H_
