// Attach, the wait queue's entries and exits, detach, and a session's health.
#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "common/errors.h"
#include "common/status_macros.h"
#include "scheduler/pod_events.h"
#include "scheduler/scheduler_impl.h"
#include "scheduler/validation.h"
#include "spdlog/spdlog.h"

namespace ipupod::scheduler {
namespace {

using device::Block;
using device::IpuState;

Waiter MakeWaiter(const Caller& caller, const AttachRequest& request, const Demand& demand,
                  std::string ticket, std::shared_ptr<AttachObserver> observer, absl::Time now) {
  Waiter w;
  w.ticket = std::move(ticket);
  w.user = caller.user;
  w.partition = request.partition;
  w.client = request.client;
  w.num_ipus = demand.size;
  w.requested_ipus = static_cast<int>(request.num_ipus);
  w.enqueued = request.submitted != absl::InfinitePast() ? std::min(request.submitted, now) : now;
  w.timeout = request.wait_timeout;
  w.observer = std::move(observer);
  return w;
}

std::string PoolName(absl::string_view partition) {
  return partition.empty() ? std::string("the pool") : absl::StrCat("partition ", partition);
}

std::string IpuList(const std::vector<int>& ipus) {
  return absl::StrCat(ipus.size() == 1 ? "IPU " : "IPUs ", absl::StrJoin(ipus, ","));
}

// The command that clears `action` on a session's faulted IPUs.
std::string SessionRecoveryHint(absl::string_view session, const std::vector<int>& faulted,
                                RecoveryAction action) {
  if (action == RecoveryAction::kIpuReset && faulted.size() == 1) {
    return absl::StrFormat("`ipupod ipu reset %d`", faulted[0]);
  }
  if (action <= RecoveryAction::kPartitionReset) {
    return absl::StrFormat("`ipupod session reset %s`", session);
  }
  return "an admin must run `ipupod pod reset`";
}

}  // namespace

// ---------------------------------------------------------------- attach

absl::StatusOr<std::string> SchedulerImpl::Attach(const Caller& caller,
                                                  const AttachRequest& request,
                                                  std::shared_ptr<AttachObserver> observer) {
  const NotifyEndedOnExit notify(this);
  MutationLock lock(this);
  IPUPOD_RETURN_IF_ERROR(CheckRunningLocked());
  IPUPOD_ASSIGN_OR_RETURN(const Demand demand, CheckAttachLocked(caller, request));
  const absl::Time now = Now();
  Waiter waiter = MakeWaiter(caller, request, demand, NextId("t", &next_ticket_), nullptr, now);
  IPUPOD_RETURN_IF_ERROR(AssociateLocked(caller, request, demand.size, waiter));
  waiter.sequence = next_sequence_++;
  waiter.hold = HoldOfLocked(waiter);
  waiter.watches_position = observer != nullptr && observer->WantsPositions();
  waiter.observer = std::move(observer);
  // Judged at its place in the walk's order: it may not take IPUs reserved
  // by anyone ahead of it, nor pass a limit.
  UpdatePrioritiesLocked(now);
  QueueWalk walk = WalkQueueLocked(&waiter, !AnyPreemptibleLocked());
  const std::string ticket = waiter.ticket;
  const size_t index = walk.candidate;
  if (index != QueueWalk::kNone && walk.plan.grants[index]) {
    GrantLocked(std::move(waiter), *walk.plan.grants[index]);
    NotifyPositionsLocked(nullptr, false);
    return ticket;
  }
  if (!request.wait) {
    const std::string& held =
        index != QueueWalk::kNone ? walk.plan.held[index] : walk.candidate_held;
    if (!held.empty()) return HeldErrorLocked(waiter, held);
    return NoFitErrorLocked(request, demand);
  }
  return EnqueueLocked(std::move(waiter), request.partition, std::move(walk));
}

absl::StatusOr<Demand> SchedulerImpl::CheckAttachLocked(const Caller& caller,
                                                        const AttachRequest& request) const {
  if (request.wait_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("wait_timeout must not be negative (0 = no limit)");
  }
  std::string pool_name = absl::StrFormat("the pod (%s)", options_.pod.name);
  int pool_size = pod_size();
  if (!request.partition.empty()) {
    const Partition* found = partitions_.Find(request.partition);
    if (found == nullptr) {
      return absl::NotFoundError(
          absl::StrFormat("partition %s does not exist; list them with `ipupod partition list`",
                          request.partition));
    }
    const Partition& p = *found;
    if (!caller.admin && caller.user != p.owner) {
      return absl::PermissionDeniedError(
          absl::StrFormat("partition %s belongs to %s; only %s or an admin may attach to it",
                          p.name, p.owner, p.owner));
    }
    pool_name = absl::StrCat("partition ", p.name);
    pool_size = p.block.size;
  }
  IPUPOD_ASSIGN_OR_RETURN(
      const int size, CheckAttachSize(request.num_ipus, pool_size, pool_name, request.auto_round));
  return DemandLocked(request.partition, size);
}

absl::Status SchedulerImpl::NoFitErrorLocked(const AttachRequest& request,
                                             const Demand& demand) const {
  const std::vector<const Waiter*> waiters = queue_.All();
  const int ahead =
      static_cast<int>(std::count_if(waiters.begin(), waiters.end(), [&](const Waiter* w) {
        return w->partition == request.partition;
      }));
  const std::string waiting =
      ahead == 0 ? "no one is waiting" : absl::StrFormat("%d waiting ahead of you", ahead);
  const bool pool = request.partition.empty();
  return absl::ResourceExhaustedError(
      absl::StrFormat("no %d free IPUs in %s: in use by %s; %s; use --wait to queue", demand.size,
                      PoolName(request.partition),
                      DescribeOccupancyLocked(pool ? PodMask() : demand.members, pool), waiting));
}

absl::StatusOr<std::string> SchedulerImpl::EnqueueLocked(Waiter waiter, absl::string_view partition,
                                                         QueueWalk walk) {
  if (queue_.full()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the attach queue is full (%d waiting); try again later", queue_.max_waiters()));
  }
  const std::string ticket = waiter.ticket;
  const int size = waiter.num_ipus;
  if (waiter.timeout > absl::ZeroDuration()) {
    IPUPOD_ASSIGN_OR_RETURN(waiter.timer_id, timer_.Schedule(waiter.timeout, [this, ticket] {
      OnWaitTimeout(ticket);
    }));
  }
  const bool settled = SettledLocked(waiter);
  IPUPOD_ASSIGN_OR_RETURN(const Waiter* queued, queue_.Push(std::move(waiter), settled));
  spdlog::debug("scheduler: {} queued for {} IPUs in {}", ticket, size, PoolName(partition));
  // Its reason and place among the others come from the walk Attach made
  // with it at its place (nothing is granted by it that was not granted
  // before, but reasons are recorded and it may preempt scavenger work).
  if (walk.candidate != QueueWalk::kNone) walk.order[walk.candidate] = queued;
  RecordReasonsLocked(walk, Now());
  const bool preempted = AnyPreemptibleLocked() && PreemptForLocked(walk);
  const QueueWalk* current = preempted ? nullptr : &walk;
  NotifyPositionsLocked(current, false);
  if (queued->watches_position && queued->told_position == 0) {
    // Told its place on entry, wherever it is (the walk's entries are the
    // first places of the queue).
    const int position = walk.candidate != QueueWalk::kNone
                             ? static_cast<int>(walk.candidate) + 1
                             : queue_.PositionOf(queued, walk_priority_);
    std::optional<QueueWalk> fresh;
    if (current == nullptr || current->stopped_early) {
      current = &fresh.emplace(WalkQueueLocked(nullptr, false, static_cast<size_t>(position)));
    }
    TellPositionLocked(*queued, position, *current);
  }
  return ticket;
}

void SchedulerImpl::GrantLocked(Waiter waiter, const Block& block) {
  Session s;
  s.id = NextId("s", &next_session_);
  s.ticket = waiter.ticket;
  s.user = waiter.user;
  s.block = block;
  s.requested_ipus = waiter.requested_ipus;
  s.partition = waiter.partition;
  s.attached_unix_ms = absl::ToUnixMillis(Now());
  s.client = waiter.client;
  s.observer = std::move(waiter.observer);
  s.account = waiter.account;
  s.qos = waiter.qos;
  s.job = waiter.job;
  s.submitted = waiter.enqueued;
  s.granted = Now();
  s.charged_until = s.granted;
  s.usage_keys = UsageKeys(s.user, s.account, s.qos);
  s.expected_end = ExpectedEndLocked(waiter, s.granted);
  s.waited_seconds = absl::ToDoubleSeconds(s.granted - waiter.enqueued);
  absl::Duration fragmented = waiter.fragmentation_delay;
  if (waiter.fragmented_since != absl::InfinitePast()) {
    fragmented += s.granted - waiter.fragmented_since;
  }
  s.fragmentation_delay_seconds = absl::ToDoubleSeconds(fragmented);
  const sharing::Qos* qos = sharing::FindQos(*policy_, s.qos);
  s.preemptible = qos != nullptr && qos->preemptible;
  s.wall_limit = WallLimitLocked(waiter);
  StartWallTimerLocked(s);
  for (int i = block.start; i < block.start + block.size; ++i) {
    // The walk grants allocatable IPUs only: idle, so Attach succeeds.
    IPUPOD_CHECK_OK(ipus_[i].Attach()) << "granting IPU " << i << " to " << s.id;
  }
  spdlog::debug("scheduler: {} granted IPUs {}-{} to {}", s.id, block.start,
                block.start + block.size - 1, s.user);
  QueueLedgerOpenLocked(s);
  if (options_.events != nullptr) {
    options_.events->OnGranted(GrantEvent{s.id, s.user, s.account, s.qos, s.job, block.size,
                                          s.waited_seconds, absl::ToUnixMillis(s.granted)});
  }
  const Session& granted = sessions_.Add(std::move(s));
  if (granted.observer) granted.observer->OnGranted(SessionViewLocked(granted));
}

// ---------------------------------------------------------------- leaving

void SchedulerImpl::OnWaitTimeout(const std::string& ticket) {
  const NotifyEndedOnExit notify(this);
  MutationLock lock(this);
  if (shutdown_) return;
  const Waiter* waiter = queue_.Find(ticket);
  if (waiter == nullptr) return;
  EndWaiterLocked(ticket, TimeoutErrorLocked(*waiter));
  RunQueueLocked();
}

absl::Status SchedulerImpl::TimeoutErrorLocked(const Waiter& waiter) const {
  const int position = queue_.PositionOf(&waiter, walk_priority_);
  const QueueWalk walk = WalkQueueLocked(nullptr, false, static_cast<size_t>(position));
  const size_t at = static_cast<size_t>(position - 1);
  const size_t index = at < walk.order.size() && walk.order[at] == &waiter ? at : QueueWalk::kNone;
  const std::vector<std::string> blocking = BlockingSessionsLocked(walk, index, waiter);
  return absl::DeadlineExceededError(absl::StrFormat(
      "waited %.1f s for %d IPUs; position %d of %d in the queue, blocked by %s; try again "
      "later or wait longer",
      absl::ToDoubleSeconds(Now() - waiter.enqueued), waiter.num_ipus, position, queue_.size(),
      blocking.empty() ? "faulted or reserved IPUs" : absl::StrJoin(blocking, ", ")));
}

void SchedulerImpl::EndWaiterLocked(const std::string& ticket, const absl::Status& why) {
  std::optional<Waiter> waiter = queue_.Remove(ticket);
  if (!waiter) return;
  if (waiter->timer_id != 0) timer_.Cancel(waiter->timer_id);
  if (waiter->observer) waiter->observer->OnEnded(why);
  spdlog::debug("scheduler: {} left the queue: {}", ticket, std::string(why.message()));
}

void SchedulerImpl::Release(absl::string_view ticket) {
  // The client is gone: no one waits for its session's usage record.
  const NotifyEndedOnExit notify(this, /*wait_for_ledger=*/false);
  MutationLock lock(this);
  if (shutdown_) return;
  if (std::optional<Waiter> waiter = queue_.Remove(ticket)) {
    if (waiter->timer_id != 0) timer_.Cancel(waiter->timer_id);
    RunQueueLocked();
    return;
  }
  const std::string* granted = sessions_.IdOfTicket(ticket);
  if (granted == nullptr) return;
  const std::string id = *granted;
  EndSessionLocked(id, nullptr, accounting::kStateReleased);
  RunQueueLocked();
}

std::string DetachedBy(const absl::Status& why) {
  const auto user = why.GetPayload(kDetachedByPayload);
  return user.has_value() ? std::string(*user) : std::string();
}

absl::StatusOr<std::vector<int>> SchedulerImpl::Detach(const Caller& caller,
                                                       absl::string_view session) {
  const NotifyEndedOnExit notify(this);
  MutationLock lock(this);
  IPUPOD_RETURN_IF_ERROR(CheckRunningLocked());
  IPUPOD_ASSIGN_OR_RETURN(Session * s, OwnSessionLocked(caller, session, "detach"));
  const std::string id = s->id;
  absl::Status why =
      absl::AbortedError(absl::StrFormat("session %s was detached by %s", id, caller.user));
  why.SetPayload(kDetachedByPayload, absl::Cord(caller.user));
  // Its own user's detach is how `ipupod attach -- COMMAND` ends: a release.
  const absl::string_view state =
      caller.user == s->user ? accounting::kStateReleased : accounting::kStateDetached;
  std::vector<int> released = EndSessionLocked(id, &why, state);
  RunQueueLocked();
  return released;
}

std::vector<int> SchedulerImpl::EndSessionLocked(const std::string& id, const absl::Status* why,
                                                 absl::string_view end_state) {
  const Session* found = sessions_.Find(id);
  if (found == nullptr) return {};
  const absl::Time now = Now();
  ChargeUsageLocked(now);
  // A session that gives its IPUs back after a preemption notice ends PREEMPTED.
  const bool preempted = found->preempt_deadline != absl::InfiniteFuture();
  const absl::string_view state = preempted ? accounting::kStatePreempted : end_state;
  QueueLedgerCloseLocked(*found, now, state);
  Session s = *sessions_.Remove(id);
  if (options_.events != nullptr) {
    options_.events->OnSessionEnded(SessionEndEvent{s.id, s.user, s.account, s.qos, s.job,
                                                    s.block.size, IpuSecondsOf(s, now),
                                                    std::string(state), absl::ToUnixMillis(now)});
  }
  if (s.wall_timer_id != 0) timer_.Cancel(s.wall_timer_id);
  if (options_.on_session_ended) ended_sessions_.push_back(s.id);
  if (why != nullptr && s.observer) s.observer->OnEnded(*why);
  std::vector<int> released;
  std::vector<int> to_reset;
  for (int i = s.block.start; i < s.block.start + s.block.size; ++i) {
    IPUPOD_CHECK_OK(ipus_[i].Detach())
        << "IPU " << i << " of " << id << ", attached by GrantLocked";
    released.push_back(i);
    if (ipus_[i].state() == IpuState::kError &&
        ipus_[i].recovery_action() <= RecoveryAction::kPartitionReset) {
      to_reset.push_back(i);
    }
  }
  AutoResetLocked(to_reset);
  spdlog::debug("scheduler: {} ended; IPUs {}-{} released", id, s.block.start,
                s.block.start + s.block.size - 1);
  return released;
}

// ---------------------------------------------------------------- reading

absl::StatusOr<Session*> SchedulerImpl::OwnSessionLocked(const Caller& caller, absl::string_view id,
                                                         absl::string_view verb) {
  Session* found = sessions_.Find(id);
  if (found == nullptr) {
    return absl::NotFoundError(absl::StrFormat(
        "session %s does not exist (it may have ended); list sessions with `ipupod info`", id));
  }
  Session& s = *found;
  if (!caller.admin && caller.user != s.user) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "session %s belongs to %s; only %s or an admin may %s it", s.id, s.user, s.user, verb));
  }
  return &s;
}

absl::StatusOr<SessionView> SchedulerImpl::GetSession(const Caller& caller,
                                                      absl::string_view session) {
  sync::MutexLock lock(&mu_);
  IPUPOD_RETURN_IF_ERROR(CheckRunningLocked());
  IPUPOD_ASSIGN_OR_RETURN(Session * s, OwnSessionLocked(caller, session, "inspect"));
  MaybeRandomFaultLocked(*s);
  IPUPOD_RETURN_IF_ERROR(SessionHealthLocked(*s));
  return SessionViewLocked(*s);
}

absl::Status SchedulerImpl::SessionHealthLocked(const Session& s) const {
  // Most severe first: failed, then the largest recovery action, then resetting.
  std::vector<int> failed, faulted, resetting;
  RecoveryAction action = RecoveryAction::kNone;
  for (int i = s.block.start; i < s.block.start + s.block.size; ++i) {
    const IpuState state = ipus_[i].state();
    if (state == IpuState::kFailed) failed.push_back(i);
    if (state == IpuState::kResetting) resetting.push_back(i);
    if (state != IpuState::kError) continue;
    faulted.push_back(i);
    action = std::max(action, ipus_[i].recovery_action());
  }
  if (!failed.empty()) {
    return UnrecoverableError(
        failed, absl::StrCat("session ", s.id, ": ", ipus_[failed[0]].HealthStatus().message()));
  }
  if (!faulted.empty()) {
    return RecoverableError(
        action, faulted,
        absl::StrFormat("session %s: %s %s a recoverable error: run %s (%s)", s.id,
                        IpuList(faulted), faulted.size() == 1 ? "has" : "have",
                        RecoveryActionName(action), SessionRecoveryHint(s.id, faulted, action)));
  }
  if (!resetting.empty()) {
    return absl::UnavailableError(absl::StrFormat("%s %s resetting; retry in a moment",
                                                  IpuList(resetting),
                                                  resetting.size() == 1 ? "is" : "are"));
  }
  return absl::OkStatus();
}

void SchedulerImpl::NotifySessionsEnded(bool wait_for_ledger) {
  FlushLedger(wait_for_ledger);
  if (!options_.on_session_ended) return;
  std::vector<std::string> ended;
  {
    sync::MutexLock lock(&mu_);
    ended.swap(ended_sessions_);
  }
  for (const std::string& id : ended) options_.on_session_ended(id);
}

std::vector<QueueEntryView> SchedulerImpl::ListQueue(size_t limit, int* total) const {
  sync::MutexLock lock(&mu_);
  if (total != nullptr) *total = queue_.size();
  const size_t shown =
      limit == 0 ? static_cast<size_t>(queue_.size()) : std::min<size_t>(limit, queue_.size());
  std::vector<QueueEntryView> entries;
  const absl::Time now = Now();
  // The walk's order is the queue's: its entries are the first positions.
  const QueueWalk walk = WalkQueueLocked(nullptr, false, shown);
  std::optional<Holdings> holdings;
  if (HasLimitsLocked()) holdings = HoldingsLocked();
  const IpuMask pool = PodMask() & ~PartitionedLocked();
  entries.reserve(shown);
  int position = 0;
  WaitQueue::Cursor cursor = queue_.Walk(walk_priority_);
  while (entries.size() < shown) {
    const Waiter& w = *cursor.Next();
    QueueEntryView e;
    e.ticket = w.ticket;
    e.position = ++position;
    e.user = w.user;
    e.num_ipus = w.num_ipus;
    e.partition = w.partition;
    e.waited_seconds = absl::ToDoubleSeconds(now - w.enqueued);
    e.timeout_seconds = absl::ToDoubleSeconds(w.timeout);
    e.client = w.client;
    e.account = w.account;
    e.qos = w.qos;
    e.job = w.job;
    e.factors = FactorsLocked(w);
    e.priority = PriorityLocked(w);
    e.reason = ReasonLocked(w, holdings ? &*holdings : nullptr, pool);
    absl::Duration fragmented = w.fragmentation_delay;
    if (w.fragmented_since != absl::InfinitePast()) fragmented += now - w.fragmented_since;
    e.fragmentation_delay_seconds = absl::ToDoubleSeconds(fragmented);
    if (static_cast<size_t>(position) <= walk.order.size()) {
      const absl::Time start = walk.plan.reservation_starts[position - 1];
      if (start != absl::InfiniteFuture()) e.expected_start_unix_ms = absl::ToUnixMillis(start);
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

std::vector<QueuePlaceView> SchedulerImpl::QueuePlaces() const {
  sync::MutexLock lock(&mu_);
  std::optional<Holdings> holdings;
  if (HasLimitsLocked()) holdings = HoldingsLocked();
  const IpuMask pool = PodMask() & ~PartitionedLocked();
  std::vector<QueuePlaceView> places;
  places.reserve(static_cast<size_t>(queue_.size()));
  for (const Waiter* w : OrderedLocked()) {
    places.push_back({w->ticket, static_cast<int>(places.size()) + 1,
                      ReasonLocked(*w, holdings ? &*holdings : nullptr, pool)});
  }
  return places;
}

std::optional<QueuePlaceView> SchedulerImpl::QueuePlaceOf(absl::string_view ticket) const {
  sync::MutexLock lock(&mu_);
  const Waiter* w = queue_.Find(ticket);
  if (w == nullptr) return std::nullopt;
  std::optional<Holdings> holdings;
  if (HasLimitsLocked()) holdings = HoldingsLocked();
  return QueuePlaceView{
      w->ticket, queue_.PositionOf(w, walk_priority_),
      ReasonLocked(*w, holdings ? &*holdings : nullptr, PodMask() & ~PartitionedLocked())};
}

}  // namespace ipupod::scheduler
