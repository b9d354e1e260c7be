// The Scheduler: creation and restore, snapshots, the queue pass, shutdown.
// Sessions, partitions and faults/resets live in their own files
// (scheduler_impl.h lists them).
#include <algorithm>
#include <array>
#include <bit>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "device/pod_config.h"
#include "scheduler/scheduler_impl.h"
#include "scheduler/validation.h"
#include "spdlog/spdlog.h"

namespace ipupod::scheduler {
namespace {

using device::Block;

// Whether any limit is set: without one the walk needs no holdings.
bool HasLimits(const sharing::SharingPolicy& p) {
  if (p.user_limits.any()) return true;
  for (const sharing::Account& a : p.accounts) {
    if (a.limits.any()) return true;
  }
  for (const sharing::Qos& q : p.qos) {
    if (q.limits.any() || q.per_user.any()) return true;
  }
  return false;
}

// The most usage records read at start-up to rebuild usage; older ones beyond
// it are left out (the log says how many were read).
constexpr int kUsageRecordsAtStart = 1000000;

absl::Status CheckOptions(const SchedulerOptions& options) {
  IPUPOD_RETURN_IF_ERROR(device::PodFromSize(options.pod.num_ipus).status());
  if (options.max_waiters < 1 || options.max_partitions < 0 || options.max_name_length < 1) {
    return absl::InvalidArgumentError(
        "max_waiters and max_name_length must be at least 1, max_partitions at least 0");
  }
  if (options.ipu_reset_time < absl::ZeroDuration() ||
      options.partition_reset_time < absl::ZeroDuration() ||
      options.pod_reset_time < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("reset times must not be negative");
  }
  const RandomFaults& rf = options.random_faults;
  if (!(rf.probability_per_operation >= 0 && rf.probability_per_operation <= 1)) {
    return absl::InvalidArgumentError("random fault probability must be between 0 and 1");
  }
  if (rf.probability_per_operation > 0 && rf.kinds.empty()) {
    return absl::InvalidArgumentError("random faults need at least one fault kind");
  }
  if (options.max_backfill_waiters < 0) {
    return absl::InvalidArgumentError("max_backfill_waiters must not be negative (0 = no bound)");
  }
  if (options.priority_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("priority_interval must not be negative (0 = none)");
  }
  if (options.policy != nullptr) return sharing::ValidateSharingPolicy(*options.policy);
  return absl::OkStatus();
}

std::string DescribeStored(const StoredPartition& p) {
  return absl::StrFormat("partition %s (start %d, size %d)", p.name, p.start, p.size);
}

// Problems of one stored partition on its own (not against the others).
std::vector<std::string> PartitionProblems(const StoredPartition& p, const device::PodConfig& pod,
                                           int max_name_length) {
  std::vector<std::string> problems;
  if (!ValidateName("name", p.name, max_name_length).ok()) {
    problems.push_back(absl::StrCat(DescribeStored(p), " has an invalid name"));
  }
  if (!device::IsPowerOfTwo(p.size) || p.start < 0 || p.start % p.size != 0) {
    problems.push_back(absl::StrCat(DescribeStored(p), " is misaligned"));
  } else if (p.start + p.size > pod.num_ipus) {
    problems.push_back(
        absl::StrFormat("%s does not fit %s (%d IPUs)", DescribeStored(p), pod.name, pod.num_ipus));
  }
  return problems;
}

}  // namespace

absl::Status CheckStoredState(const StoredState& state, const device::PodConfig& pod,
                              int max_name_length) {
  std::vector<std::string> problems;
  const auto& parts = state.partitions;
  for (size_t i = 0; i < parts.size(); ++i) {
    std::vector<std::string> own = PartitionProblems(parts[i], pod, max_name_length);
    problems.insert(problems.end(), own.begin(), own.end());
    for (size_t j = 0; j < i; ++j) {
      if (parts[j].name == parts[i].name) {
        problems.push_back(absl::StrCat("partition ", parts[i].name, " is stored twice"));
      } else if (parts[i].size > 0 && parts[j].size > 0 &&
                 Block{parts[i].start, parts[i].size}.Overlaps(
                     Block{parts[j].start, parts[j].size})) {
        problems.push_back(
            absl::StrCat(DescribeStored(parts[i]), " overlaps ", DescribeStored(parts[j])));
      }
    }
  }
  for (const StoredFailure& f : state.failures) {
    if (f.ipu < 0 || f.ipu >= pod.num_ipus) {
      problems.push_back(absl::StrFormat("failed IPU %d is outside %s", f.ipu, pod.name));
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("the stored state does not fit ", pod.name, ": ", absl::StrJoin(problems, "; "),
                   "; start with a pod that holds them, or remove them from the store"));
}

std::string JoinSessions(const std::vector<const Session*>& sessions) {
  return absl::StrJoin(sessions, ", ", [](std::string* out, const Session* s) {
    absl::StrAppend(out, s->id, " (", s->user, ")");
  });
}

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(SchedulerOptions options,
                                                             StateStore* store) {
  IPUPOD_RETURN_IF_ERROR(CheckOptions(options));
  if (options.pod.ipu == nullptr) options.pod.ipu = &device::kGc200;
  if (!options.clock) options.clock = &absl::Now;
  if (options.policy == nullptr) {
    options.policy = std::make_shared<const sharing::SharingPolicy>(sharing::DefaultPolicy());
  }
  std::vector<accounting::UsageRecord> usage;
  if (options.ledger != nullptr) {
    // Enough history for the decayed usage (eight half-lives leave 0.4 %) and
    // the limits' window.
    const sharing::SharingPolicy& p = *options.policy;
    accounting::LedgerQuery query;
    query.since_unix_ms =
        absl::ToUnixMillis(options.clock() - std::max(8 * p.usage_half_life, p.usage_window));
    query.limit = kUsageRecordsAtStart;
    IPUPOD_ASSIGN_OR_RETURN(usage, options.ledger->Query(query));
  }
  StoredState state;
  if (store != nullptr) {
    IPUPOD_ASSIGN_OR_RETURN(state, store->Load());
  }
  IPUPOD_RETURN_IF_ERROR(CheckStoredState(state, options.pod, options.max_name_length));
  uint64_t boot_id = 1;
  if (store != nullptr) {
    IPUPOD_ASSIGN_OR_RETURN(boot_id, store->NextBootId());
  }
  auto scheduler = std::make_unique<SchedulerImpl>(std::move(options), store, boot_id);
  scheduler->Restore(state);
  if (options.ledger != nullptr) scheduler->LoadUsage(usage);
  return scheduler;
}

SchedulerImpl::SchedulerImpl(SchedulerOptions options, StateStore* store, uint64_t boot_id)
    : options_(std::move(options)),
      store_(store),
      boot_id_(boot_id),
      partitions_(options_.pod.num_ipus),
      sessions_(options_.pod.num_ipus),
      queue_(options_.max_waiters),
      resets_(options_.pod.num_ipus),
      // The order reads the current pass; the walks that use it hold mu_.
      walk_priority_{
          [this](const Waiter& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return PriorityLocked(w); },
          [this](const Waiter& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return SettledLocked(w); }},
      rng_(options_.random_faults.seed),
      policy_(options_.policy),
      decayed_usage_(options_.policy->usage_half_life),
      window_usage_(options_.policy->usage_window),
      // Pending timers are wait timeouts (<= max_waiters), resets (each
      // started on at least one IPU no pending reset covered), preemption
      // deadlines (at most one per session), the periodic priority pass and
      // the ledger write (at most one pending), so this bound is not reached
      // but by an admin failing and repairing IPUs mid-reset over and over
      // (ResetBook::Uncover); the timer then refuses the reset, an error.
      timer_(static_cast<size_t>(options_.max_waiters) + 3 * device::kMaxPodIpus + 2,
             options_.clock) {
  sync::MutexLock lock(&mu_);
  for (int i = 0; i < pod_size(); ++i) ipus_.emplace_back(i, *options_.pod.ipu);
  ArmPriorityTimerLocked();
}

SchedulerImpl::~SchedulerImpl() { Shutdown(); }

void SchedulerImpl::Restore(const StoredState& state) {
  MutationLock lock(this);
  // CheckStoredState passed: the blocks are aligned, inside the pod and apart.
  for (const StoredPartition& p : state.partitions) {
    partitions_.Add(Partition{p.name, Block{p.start, p.size}, p.owner, p.created_unix_ms});
  }
  for (const StoredFailure& f : state.failures) ipus_[f.ipu].Fail(f.reason);
  spdlog::info("scheduler: {} boot {}: {} partitions, {} failed IPUs restored", options_.pod.name,
               boot_id_, state.partitions.size(), state.failures.size());
}

// ---------------------------------------------------------------- helpers

absl::Status SchedulerImpl::CheckRunningLocked() const {
  if (!shutdown_) return absl::OkStatus();
  return absl::UnavailableError("the server is shutting down; try again when it is back");
}

absl::Status SchedulerImpl::CheckIpuId(int ipu) const {
  if (ipu >= 0 && ipu < pod_size()) return absl::OkStatus();
  return absl::NotFoundError(absl::StrFormat("IPU %d does not exist; %s has IPUs 0 to %d", ipu,
                                             options_.pod.name, pod_size() - 1));
}

IpuMask SchedulerImpl::PodMask() const { return MaskOf(Block{0, pod_size()}); }

IpuMask SchedulerImpl::AllocatableLocked() const {
  IpuMask mask;
  for (int i = 0; i < pod_size(); ++i) mask.set(i, ipus_[i].Allocatable());
  return mask;
}

IpuMask SchedulerImpl::HealthyLocked() const {
  IpuMask mask;
  for (int i = 0; i < pod_size(); ++i) mask.set(i, ipus_[i].state() != device::IpuState::kFailed);
  return mask;
}

IpuMask SchedulerImpl::PartitionedLocked() const { return partitions_.Partitioned(); }

Demand SchedulerImpl::DemandLocked(const std::string& partition, int size) const {
  if (partition.empty())
    return Demand{size, Block{0, pod_size()}, PodMask() & ~PartitionedLocked()};
  const Block block = partitions_.at(partition).block;
  return Demand{size, block, MaskOf(block)};
}

const Session* SchedulerImpl::SessionOfIpuLocked(int ipu) const { return sessions_.SessionOf(ipu); }

std::string SchedulerImpl::NextId(absl::string_view prefix, uint64_t* counter) const {
  return absl::StrCat(prefix, boot_id_, "-", (*counter)++);
}

std::string SchedulerImpl::DescribeOccupancyLocked(const IpuMask& mask,
                                                   bool with_partitions) const {
  std::vector<std::string> parts;
  for (const SessionView& s : SessionViewsLocked()) {
    if ((MaskOf(Block{s.ipus.front(), static_cast<int>(s.ipus.size())}) & mask).none()) continue;
    parts.push_back(absl::StrFormat("session %s (%s, IPUs %d-%d)", s.id, s.user, s.ipus.front(),
                                    s.ipus.back()));
  }
  std::vector<const Partition*> partitions;
  for (const auto& [name, p] : partitions_.all()) {
    if (with_partitions && (MaskOf(p.block) & mask).any()) partitions.push_back(&p);
  }
  std::sort(partitions.begin(), partitions.end(),
            [](const Partition* a, const Partition* b) { return a->block.start < b->block.start; });
  for (const Partition* p : partitions) {
    parts.push_back(absl::StrFormat("partition %s (%s, IPUs %s)", p->name, p->owner,
                                    FormatIpus(MaskOf(p->block))));
  }
  IpuMask failed, faulted, resetting;
  for (int i = 0; i < pod_size(); ++i) {
    if (!mask.test(i) || !sessions_.HolderOf(i).empty()) continue;
    failed.set(i, ipus_[i].state() == device::IpuState::kFailed);
    faulted.set(i, ipus_[i].state() == device::IpuState::kError);
    resetting.set(i, ipus_[i].state() == device::IpuState::kResetting);
  }
  if (failed.any()) parts.push_back(absl::StrCat("failed IPUs ", FormatIpus(failed)));
  if (faulted.any()) parts.push_back(absl::StrCat("IPUs in error ", FormatIpus(faulted)));
  if (resetting.any()) parts.push_back(absl::StrCat("resetting IPUs ", FormatIpus(resetting)));
  return parts.empty() ? "nothing" : absl::StrJoin(parts, ", ");
}

// ---------------------------------------------------------------- views

IpuView SchedulerImpl::IpuViewLocked(int ipu) const {
  const device::Ipu& d = ipus_[ipu];
  IpuView view{ipu,
               d.state(),
               d.recovery_action(),
               partitions_.NameOf(ipu),
               sessions_.HolderOf(ipu),
               "",
               d.memory_used_bytes(),
               d.memory_total_bytes(),
               d.failure_reason()};
  if (const Session* s = SessionOfIpuLocked(ipu)) {
    view.owner = s->user;
  } else if (!view.partition.empty()) {
    view.owner = partitions_.at(view.partition).owner;
  }
  return view;
}

PartitionView SchedulerImpl::PartitionViewLocked(const Partition& p) const {
  PartitionView view{p.name,  p.block,           device::DeviceIdOf(pod_size(), p.block),
                     p.owner, p.created_unix_ms, {}};
  for (const SessionView& s : SessionViewsLocked()) {
    if (s.partition == p.name) view.sessions.push_back(s.id);
  }
  return view;
}

SessionView SchedulerImpl::SessionViewLocked(const Session& s) const {
  SessionView view;
  view.id = s.id;
  view.user = s.user;
  for (int i = s.block.start; i < s.block.start + s.block.size; ++i) view.ipus.push_back(i);
  for (int i = s.block.start + s.requested_ipus; i < s.block.start + s.block.size; ++i) {
    view.idle_ipus.push_back(i);  // auto-round extras: the last IPUs of the block
  }
  view.device_id = device::DeviceIdOf(pod_size(), s.block);
  view.requested_ipus = s.requested_ipus;
  view.partition = s.partition;
  view.attached_unix_ms = s.attached_unix_ms;
  view.client = s.client;
  view.needs_load = s.needs_load;
  view.account = s.account;
  view.qos = s.qos;
  view.job = s.job;
  if (s.expected_end != absl::InfiniteFuture()) {
    view.expected_end_unix_ms = absl::ToUnixMillis(s.expected_end);
  }
  view.waited_seconds = s.waited_seconds;
  view.fragmentation_delay_seconds = s.fragmentation_delay_seconds;
  return view;
}

std::vector<SessionView> SchedulerImpl::SessionViewsLocked() const {
  std::vector<SessionView> views;
  for (const auto& [id, s] : sessions_.all()) views.push_back(SessionViewLocked(s));
  std::sort(views.begin(), views.end(),
            [](const SessionView& a, const SessionView& b) { return a.ipus[0] < b.ipus[0]; });
  return views;
}

PodView SchedulerImpl::GetPod() const {
  sync::MutexLock lock(&mu_);
  PodView pod;
  pod.name = options_.pod.name;
  pod.num_ipus = pod_size();
  pod.free_ipus = static_cast<int>((AllocatableLocked() & ~PartitionedLocked()).count());
  pod.failed_ipus = static_cast<int>((PodMask() & ~HealthyLocked()).count());
  pod.waiting = queue_.size();
  for (int i = 0; i < pod_size(); ++i) pod.ipus.push_back(IpuViewLocked(i));
  for (const auto& [name, p] : partitions_.all()) pod.partitions.push_back(PartitionViewLocked(p));
  std::sort(
      pod.partitions.begin(), pod.partitions.end(),
      [](const PartitionView& a, const PartitionView& b) { return a.block.start < b.block.start; });
  pod.sessions = SessionViewsLocked();
  return pod;
}

// ---------------------------------------------------------------- queue pass

namespace {

// The shortest hold of each size among the waiters a walk has not reached
// yet (BackfillWalk::MayStart), from the queue's counts less those reached.
class Unreached {
 public:
  Unreached(const WaitQueue& queue, const Waiter* extra) : holds_(queue.holds()), extra_(extra) {
    for (int level = 0; level < kSizeLevels; ++level) next_[level] = holds_[level].begin();
  }

  void Reach(const Waiter& w) {
    if (&w == extra_) {
      extra_ = nullptr;  // not counted in the queue's figures
      return;
    }
    const int level = SizeLevel(w.num_ipus);
    auto& reached = reached_[level];
    ++reached[w.hold];
    auto& next = next_[level];
    while (next != holds_[level].end() && reached[next->first] == next->second) ++next;
  }
  // Whether any of them might start (or be blocked by fragmentation alone).
  bool AnyMayStart(const BackfillWalk& walk) const {
    if (extra_ != nullptr && walk.MayStart(extra_->num_ipus, extra_->hold)) return true;
    for (int level = 0; level < kSizeLevels; ++level) {
      if (next_[level] != holds_[level].end() && walk.MayStart(1 << level, next_[level]->first)) {
        return true;
      }
    }
    return false;
  }

 private:
  const std::array<WaitQueue::Holds, kSizeLevels>& holds_;
  // Per size, the shortest hold not all of whose waiters were reached.
  std::array<WaitQueue::Holds::const_iterator, kSizeLevels> next_;
  std::array<absl::flat_hash_map<absl::Duration, int>, kSizeLevels> reached_;
  const Waiter* extra_;
};

}  // namespace

bool SchedulerImpl::HasLimitsLocked() const { return HasLimits(*policy_); }

Demand SchedulerImpl::DemandOfLocked(const Waiter& w, const IpuMask& pool) const {
  if (w.partition.empty()) return Demand{w.num_ipus, Block{0, pod_size()}, pool, w.hold};
  const Block block = partitions_.at(w.partition).block;
  return Demand{w.num_ipus, block, MaskOf(block), w.hold};
}

Demand SchedulerImpl::DemandOfLocked(const Waiter& w) const {
  return DemandOfLocked(w, PodMask() & ~PartitionedLocked());
}

absl::Duration SchedulerImpl::HoldOfLocked(const Waiter& w) const {
  const absl::Time end = ExpectedEndLocked(w, absl::UnixEpoch());
  return end == absl::InfiniteFuture() ? absl::InfiniteDuration() : end - absl::UnixEpoch();
}

PlanContext SchedulerImpl::PlanContextLocked() const {
  PlanContext c;
  c.allocatable = AllocatableLocked();
  c.healthy = HealthyLocked();
  c.now = Now();
  c.fifo = policy_->order == sharing::QueueOrder::kFifo;
  for (int i = 0; i < pod_size(); ++i) c.free_at[i] = c.now;
  for (const auto& [id, s] : sessions_.all()) {
    const absl::Time free_at = std::max(c.now, std::min(s.expected_end, s.preempt_deadline));
    for (int i = s.block.start; i < s.block.start + s.block.size; ++i) c.free_at[i] = free_at;
  }
  return c;
}

QueueWalk SchedulerImpl::WalkQueueLocked(const Waiter* candidate, bool may_stop_early,
                                         size_t reach) const {
  QueueWalk walk;
  const PlanContext context = PlanContextLocked();
  BackfillWalk plan(context);
  std::optional<Holdings> holdings;
  if (HasLimits(*policy_)) holdings = HoldingsLocked();
  const IpuMask pool = PodMask() & ~PartitionedLocked();
  const size_t bound = static_cast<size_t>(options_.max_backfill_waiters);
  Unreached unreached(queue_, candidate);
  bool head = false;  // the first waiter that cannot start was met
  size_t behind_head = 0;
  // Where nothing is free that anyone could use (a full pod, the common case
  // of a long queue), the walk ends before it starts: no order is needed.
  walk.stopped_early = may_stop_early && !unreached.AnyMayStart(plan);
  std::optional<WaitQueue::Cursor> cursor;
  if (!walk.stopped_early) cursor.emplace(queue_.Walk(walk_priority_, candidate));
  while (const Waiter* w = walk.order.size() < reach && cursor ? cursor->Next() : nullptr) {
    if (bound > 0 && behind_head >= bound) break;
    if (may_stop_early && !unreached.AnyMayStart(plan)) {
      walk.stopped_early = true;
      break;
    }
    if (may_stop_early) unreached.Reach(*w);
    const size_t i = walk.order.size();
    walk.order.push_back(w);
    if (w == candidate) walk.candidate = i;
    plan.Add(DemandOfLocked(*w, pool), holdings ? HeldByLocked(*w, *holdings, context.now) : "");
    if (plan.plan().grants[i] && holdings) AddHolding(*holdings, *w);
    if (head) ++behind_head;
    if (!plan.plan().grants[i]) head = true;
  }
  if (candidate != nullptr && walk.candidate == QueueWalk::kNone && holdings) {
    walk.candidate_held = HeldByLocked(*candidate, *holdings, context.now);
  }
  walk.free = plan.free();
  walk.plan = std::move(plan.mutable_plan());
  return walk;
}

void SchedulerImpl::RecordReasonsLocked(const QueueWalk& walk, absl::Time now) {
  const uint64_t id = next_walk_++;
  const BackfillPlan& plan = walk.plan;
  for (size_t i = 0; i < walk.order.size(); ++i) {
    Waiter& w = *queue_.Mutable(walk.order[i]);
    w.walk = id;
    const bool fragmented = !plan.grants[i] && plan.held[i].empty() && plan.fragmented[i];
    if (w.fragmented_since != absl::InfinitePast() && !fragmented) {
      w.fragmentation_delay += now - w.fragmented_since;
      w.fragmented_since = absl::InfinitePast();
      queue_.SetFragmented(&w, false);
    } else if (fragmented && w.fragmented_since == absl::InfinitePast()) {
      w.fragmented_since = now;
      queue_.SetFragmented(&w, true);
    }
    if (plan.grants[i]) continue;
    w.reason = !plan.held[i].empty()               ? plan.held[i]
               : fragmented                        ? "Fragmentation"
               : plan.fits_without_reservations[i] ? "Priority"
                                                   : "Resources";
  }
  // Waiters it did not reach are not blocked by fragmentation alone as far as
  // anyone knows (not at all, if it stopped early).
  for (const Waiter* f :
       queue_.fragmented_count() == 0 ? std::vector<const Waiter*>() : queue_.Fragmented()) {
    if (f->walk == id) continue;
    Waiter& w = *queue_.Mutable(f);
    w.fragmentation_delay += now - w.fragmented_since;
    w.fragmented_since = absl::InfinitePast();
    queue_.SetFragmented(&w, false);
  }
  last_walk_ = RecordedWalk{id, walk.stopped_early, walk.free};
}

std::string SchedulerImpl::ReasonLocked(const Waiter& w, const Holdings* holdings,
                                        const IpuMask& pool) const {
  if (w.walk == last_walk_.id) return w.reason;
  if (!last_walk_.stopped_early) return w.reason.empty() ? "Priority" : w.reason;
  // The walk stopped before it, where no one further could start: it would
  // have found no grant and no fragmentation, only whether it fits at all.
  if (holdings != nullptr) {
    std::string held = HeldByLocked(w, *holdings, Now());
    if (!held.empty()) return held;
  }
  const Demand d = DemandOfLocked(w, pool);
  const bool fits =
      FindFreeBlock(last_walk_.free & d.members, IpuMask(), d.region, d.size).has_value();
  return fits ? "Priority" : "Resources";
}

void SchedulerImpl::RunQueueLocked() {
  if (shutdown_) return;
  const absl::Time now = Now();
  UpdatePrioritiesLocked(now);
  std::optional<QueueWalk> walk;
  if (!queue_.empty()) {
    const bool preemptible = AnyPreemptibleLocked();
    walk = WalkQueueLocked(nullptr, !preemptible);
    RecordReasonsLocked(*walk, now);
    std::vector<std::pair<std::string, Block>> grants;
    for (size_t i = 0; i < walk->order.size(); ++i) {
      if (walk->plan.grants[i]) grants.emplace_back(walk->order[i]->ticket, *walk->plan.grants[i]);
    }
    if (!grants.empty()) walk.reset();  // it names waiters that leave now
    for (auto& [ticket, block] : grants) {
      std::optional<Waiter> waiter = queue_.Remove(ticket);
      if (waiter->timer_id != 0) timer_.Cancel(waiter->timer_id);
      GrantLocked(std::move(*waiter), block);
    }
    if (!queue_.empty() && preemptible) {
      if (!walk) walk = WalkQueueLocked(nullptr, false);
      if (PreemptForLocked(*walk)) walk.reset();
    }
  }
  NotifyPositionsLocked(walk ? &*walk : nullptr, false);
}

std::vector<const Waiter*> SchedulerImpl::OrderedLocked() const {
  std::vector<const Waiter*> order;
  order.reserve(queue_.size());
  WaitQueue::Cursor cursor = queue_.Walk(walk_priority_);
  while (const Waiter* w = cursor.Next()) order.push_back(w);
  return order;
}

void SchedulerImpl::NotifyPositionsLocked(const QueueWalk* walk, bool everyone) {
  if (queue_.watchers() == 0) return;
  const int length = queue_.size();
  const int last = everyone ? length : std::min(length, kPositionsAlwaysSent);
  std::vector<std::pair<const Waiter*, int>> changed;
  WaitQueue::Cursor cursor = queue_.Walk(walk_priority_);
  for (int position = 1; position <= last; ++position) {
    const Waiter* w = cursor.Next();
    if (w->watches_position && (w->told_position != position || w->told_length != length)) {
      changed.emplace_back(w, position);
    }
  }
  if (changed.empty()) return;
  // Blocking sessions come from a walk that reached every waiter it could,
  // as far as the last one told.
  std::optional<QueueWalk> fresh;
  if (walk == nullptr || walk->stopped_early) {
    walk = &fresh.emplace(WalkQueueLocked(nullptr, false, changed.back().second));
  }
  for (const auto& [w, position] : changed) TellPositionLocked(*w, position, *walk);
}

void SchedulerImpl::TellPositionLocked(const Waiter& w, int position, const QueueWalk& walk) {
  Waiter& told = *queue_.Mutable(&w);
  told.told_position = position;
  told.told_length = queue_.size();
  if (!w.observer) return;
  // The walk's entries are the queue's first places.
  const size_t at = static_cast<size_t>(position - 1);
  const size_t index = at < walk.order.size() && walk.order[at] == &w ? at : QueueWalk::kNone;
  w.observer->OnQueued(QueuePositionView{w.ticket, position, told.told_length,
                                         BlockingSessionsLocked(walk, index, w)});
}

std::vector<std::string> SchedulerImpl::BlockingSessionsLocked(const QueueWalk& walk, size_t index,
                                                               const Waiter& waiter) const {
  // The sessions in the block the waiter reserved, or in its whole pool when
  // it could not reserve one, in IPU order. (Walked over the IPUs, not over
  // session views: this runs for every waiter told a new position.)
  const bool reserved = index != QueueWalk::kNone && walk.plan.reservations[index];
  const IpuMask scope =
      reserved ? MaskOf(*walk.plan.reservations[index]) : DemandOfLocked(waiter).members;
  std::vector<std::string> ids;
  for (int i = 0; i < pod_size(); ++i) {
    if (!scope.test(i) || sessions_.HolderOf(i).empty()) continue;
    if (ids.empty() || ids.back() != sessions_.HolderOf(i)) ids.push_back(sessions_.HolderOf(i));
  }
  return ids;
}

// ---------------------------------------------------------------- shutdown

void SchedulerImpl::Shutdown() {
  std::vector<ResetDone> dones;
  {
    MutationLock lock(this);
    if (!shutdown_) FinishShutdownLocked();
    // The timer stops below, so no pending reset will finish: their IPUs
    // stay kResetting and their callers are told.
    for (PendingReset& reset : resets_.Close()) {
      if (reset.done) dones.push_back(std::move(reset.done));
    }
  }
  timer_.Stop();  // outside mu_: a running timer callback may be waiting for it
  for (ResetDone& done : dones) {
    done(absl::UnavailableError("the server is shutting down; the reset did not complete"));
  }
  NotifySessionsEnded();
}

void SchedulerImpl::FinishShutdownLocked() {
  shutdown_ = true;
  for (Waiter& w : queue_.TakeAll()) {
    if (w.observer) {
      w.observer->OnEnded(absl::UnavailableError(
          absl::StrFormat("server is shutting down; attach request %s ended", w.ticket)));
    }
  }
  std::vector<std::string> ids;
  for (const auto& [id, s] : sessions_.all()) ids.push_back(id);
  for (const std::string& id : ids) {
    const absl::Status why =
        absl::UnavailableError(absl::StrFormat("server is shutting down; session %s ended", id));
    EndSessionLocked(id, &why, accounting::kStateShutdown);
  }
  spdlog::info("scheduler: shut down; {} sessions ended", ids.size());
}

}  // namespace ipupod::scheduler
