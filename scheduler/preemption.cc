// Preemption: a waiting request of a QoS that is not preemptible takes the
// IPUs of preemptible (scavenger) sessions when nothing else frees IPUs for it
// soon. The sessions are told (AttachObserver::OnPreempted), given the
// policy's grace to give their IPUs back (a job checkpoints and requeues),
// and ended PREEMPTED when it runs out. Nothing else is ever preempted.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/sync.h"
#include "scheduler/scheduler_impl.h"
#include "spdlog/spdlog.h"

namespace ipupod::scheduler {

bool SchedulerImpl::AnyPreemptibleLocked() const {
  return std::any_of(sessions_.all().begin(), sessions_.all().end(), [](const auto& kv) {
    return kv.second.preemptible && kv.second.preempt_deadline == absl::InfiniteFuture();
  });
}

bool SchedulerImpl::PreemptForLocked(const QueueWalk& walk) {
  if (!AnyPreemptibleLocked()) return false;
  const absl::Time now = Now();
  const BackfillPlan& plan = walk.plan;
  IpuMask reserved_ahead;
  for (size_t i = 0; i < walk.order.size(); ++i) {
    const Waiter& w = *walk.order[i];
    if (plan.grants[i] || !plan.held[i].empty()) continue;
    const sharing::Qos* q = sharing::FindQos(*policy_, w.qos);
    const bool may_preempt = q != nullptr && !q->preemptible;
    // It preempts only if its own reservation would not start within the grace.
    if (may_preempt && plan.reservation_starts[i] > now + policy_->preempt_grace) {
      if (std::optional<device::Block> block = PreemptableBlockLocked(w, reserved_ahead)) {
        std::set<std::string> ids;
        for (int ipu = block->start; ipu < block->start + block->size; ++ipu) {
          if (!sessions_.HolderOf(ipu).empty()) ids.insert(sessions_.HolderOf(ipu));
        }
        for (const std::string& id : ids) PreemptSessionLocked(*sessions_.Find(id), w);
        return true;  // one preemption per walk; the next walk sees its effect
      }
    }
    if (plan.reservations[i]) reserved_ahead |= MaskOf(*plan.reservations[i]);
  }
  return false;
}

std::optional<device::Block> SchedulerImpl::PreemptableBlockLocked(const Waiter& w,
                                                                   const IpuMask& blocked) const {
  const Demand d = DemandOfLocked(w);
  const IpuMask allocatable = AllocatableLocked();
  const IpuMask healthy = HealthyLocked();
  std::optional<device::Block> best;
  int best_cost = 0;
  for (int start = d.region.start; start < d.region.start + d.region.size; start += d.size) {
    const device::Block candidate{start, d.size};
    const IpuMask bits = MaskOf(candidate);
    if ((bits & ~(d.members & healthy)).any() || (bits & blocked).any()) continue;
    std::set<const Session*> victims;
    bool possible = true;
    for (int ipu = start; ipu < start + d.size && possible; ++ipu) {
      if (allocatable.test(ipu)) continue;
      const Session* s = SessionOfIpuLocked(ipu);
      possible = s != nullptr && s->preemptible && s->preempt_deadline == absl::InfiniteFuture();
      if (possible) victims.insert(s);
    }
    if (!possible || victims.empty()) continue;
    int cost = 0;
    for (const Session* s : victims) cost += s->block.size;
    if (!best || cost < best_cost) {
      best = candidate;
      best_cost = cost;
    }
  }
  return best;
}

void SchedulerImpl::PreemptSessionLocked(Session& s, const Waiter& by) {
  const absl::Duration grace = policy_->preempt_grace;
  s.preempt_deadline = Now() + grace;
  PreemptionView notice;
  notice.session = s.id;
  notice.by_user = by.user;
  notice.by_qos = by.qos;
  notice.deadline_unix_ms = absl::ToUnixMillis(s.preempt_deadline);
  notice.grace_seconds = absl::ToDoubleSeconds(grace);
  notice.message = absl::StrFormat(
      "session %s (QoS %s) is preempted for %s's request for %d IPUs (QoS %s); it is ended in "
      "%s unless it releases its IPUs first",
      s.id, s.qos, by.user, by.num_ipus, by.qos, absl::FormatDuration(grace));
  spdlog::info("scheduler: {}", notice.message);
  if (s.observer) s.observer->OnPreempted(notice);
  const std::string id = s.id;
  absl::StatusOr<uint64_t> timer = timer_.Schedule(grace, [this, id] { OnPreemptDeadline(id); });
  if (!timer.ok()) spdlog::error("scheduler: preemption of {}: {}", id, timer.status().ToString());
}

void SchedulerImpl::OnPreemptDeadline(const std::string& id) {
  const NotifyEndedOnExit notify(this);
  MutationLock lock(this);
  if (shutdown_) return;
  const Session* s = sessions_.Find(id);
  if (s == nullptr) return;  // it gave its IPUs back in time
  const absl::Status why = absl::AbortedError(absl::StrFormat(
      "session %s was preempted: its QoS %s is preemptible and a request of a higher class "
      "needed its IPUs; the grace of %s ran out",
      id, s->qos, absl::FormatDuration(policy_->preempt_grace)));
  EndSessionLocked(id, &why, accounting::kStatePreempted);
  RunQueueLocked();
}

}  // namespace ipupod::scheduler
