// Partitions: named aligned blocks reserved for their owner. Persisted through
// the StateStore before memory changes, so a failed write changes nothing.
#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "scheduler/scheduler_impl.h"
#include "scheduler/validation.h"
#include "spdlog/spdlog.h"

namespace ipupod::scheduler {

using device::Block;

absl::StatusOr<PartitionView> SchedulerImpl::CreatePartition(const Caller& caller,
                                                             absl::string_view name, int64_t size) {
  MutationLock lock(this);
  IPUPOD_RETURN_IF_ERROR(CheckRunningLocked());
  IPUPOD_RETURN_IF_ERROR(ValidateName("partition name", name, options_.max_name_length));
  if (const Partition* existing = partitions_.Find(name)) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "partition %s already exists (owner %s); pick another name", name, existing->owner));
  }
  IPUPOD_RETURN_IF_ERROR(CheckPartitionSize(size, pod_size(), options_.pod.name));
  if (static_cast<int>(partitions_.size()) >= options_.max_partitions) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("the pod already has %d partitions, the most it allows; remove one first",
                        partitions_.size()));
  }
  IPUPOD_ASSIGN_OR_RETURN(const Block block, PlacePartitionLocked(name, static_cast<int>(size)));
  Partition p{std::string(name), block, caller.user, absl::ToUnixMillis(Now())};
  if (store_ != nullptr) {
    IPUPOD_RETURN_IF_ERROR(store_->PutPartition(
        StoredPartition{p.name, block.start, block.size, p.owner, p.created_unix_ms}));
  }
  // PlacePartitionLocked chose an aligned block of allocatable IPUs in no partition.
  const Partition& added = partitions_.Add(std::move(p));
  spdlog::info("scheduler: partition {} created by {} on IPUs {}", added.name, caller.user,
               FormatIpus(MaskOf(block)));
  // Nothing became allocatable, but pool waiters' reservations may move.
  NotifyPositionsLocked(nullptr, false);
  return PartitionViewLocked(added);
}

absl::StatusOr<Block> SchedulerImpl::PlacePartitionLocked(absl::string_view name, int size) const {
  const IpuMask usable = AllocatableLocked() & ~PartitionedLocked();
  const Block pod{0, pod_size()};
  // Keep clear of pool waiters' reservations when there is a choice.
  std::optional<Block> block =
      FindFreeBlock(usable, WalkQueueLocked(nullptr, false).plan.reserved, pod, size);
  if (!block) block = FindFreeBlock(usable, IpuMask(), pod, size);
  if (block) return *block;
  return absl::ResourceExhaustedError(absl::StrFormat(
      "no free aligned block of %d IPUs for partition %s: the pod holds %s; free IPUs: %s", size,
      name, DescribeOccupancyLocked(PodMask(), true), usable.any() ? FormatIpus(usable) : "none"));
}

absl::StatusOr<PartitionView> SchedulerImpl::GetPartition(absl::string_view name) const {
  sync::MutexLock lock(&mu_);
  const Partition* p = partitions_.Find(name);
  if (p == nullptr) {
    return absl::NotFoundError(absl::StrFormat(
        "partition %s does not exist; list them with `ipupod partition list`", name));
  }
  return PartitionViewLocked(*p);
}

std::vector<PartitionView> SchedulerImpl::ListPartitions() const {
  sync::MutexLock lock(&mu_);
  std::vector<PartitionView> views;
  for (const auto& [name, p] : partitions_.all()) views.push_back(PartitionViewLocked(p));
  std::sort(views.begin(), views.end(), [](const PartitionView& a, const PartitionView& b) {
    return a.block.start < b.block.start;
  });
  return views;
}

absl::StatusOr<const Partition*> SchedulerImpl::OwnPartitionLocked(const Caller& caller,
                                                                   absl::string_view name,
                                                                   absl::string_view verb) const {
  const Partition* found = partitions_.Find(name);
  if (found == nullptr) {
    return absl::NotFoundError(absl::StrFormat(
        "partition %s does not exist; list them with `ipupod partition list`", name));
  }
  const Partition& p = *found;
  if (!caller.admin && caller.user != p.owner) {
    return absl::PermissionDeniedError(
        absl::StrFormat("partition %s belongs to %s; only %s or an admin may %s it", p.name,
                        p.owner, p.owner, verb));
  }
  return &p;
}

absl::StatusOr<std::vector<std::string>> SchedulerImpl::RemovePartition(const Caller& caller,
                                                                        absl::string_view name,
                                                                        bool force) {
  const NotifyEndedOnExit notify(this);
  MutationLock lock(this);
  IPUPOD_RETURN_IF_ERROR(CheckRunningLocked());
  IPUPOD_ASSIGN_OR_RETURN(const Partition* p, OwnPartitionLocked(caller, name, "remove"));
  const std::string pname = p->name;
  std::vector<const Session*> attached;
  for (const auto& [id, s] : sessions_.all()) {
    if (s.partition == pname) attached.push_back(&s);
  }
  std::sort(attached.begin(), attached.end(),
            [](const Session* a, const Session* b) { return a->block.start < b->block.start; });
  if (!attached.empty() && !force) {
    return absl::FailedPreconditionError(
        absl::StrFormat("partition %s has sessions %s; detach them first, or use --force", pname,
                        JoinSessions(attached)));
  }
  if (store_ != nullptr) IPUPOD_RETURN_IF_ERROR(store_->DeletePartition(pname));
  std::vector<std::string> detached;
  for (const Session* s : attached) detached.push_back(s->id);
  EndPartitionUsersLocked(pname, detached, caller.user);
  ErasePartitionLocked(pname);
  spdlog::info("scheduler: partition {} removed by {} ({} sessions detached)", pname, caller.user,
               detached.size());
  RunQueueLocked();
  return detached;
}

void SchedulerImpl::EndPartitionUsersLocked(const std::string& partition,
                                            const std::vector<std::string>& sessions,
                                            absl::string_view by) {
  for (const std::string& id : sessions) {
    const absl::Status why = absl::AbortedError(
        absl::StrFormat("session %s ended: partition %s was removed by %s", id, partition, by));
    EndSessionLocked(id, &why, accounting::kStateDetached);
  }
  std::vector<std::string> tickets;
  for (const Waiter* w : OrderedLocked()) {
    if (w->partition == partition) tickets.push_back(w->ticket);
  }
  for (const std::string& ticket : tickets) {
    EndWaiterLocked(ticket, absl::AbortedError(absl::StrFormat(
                                "attach request %s ended: partition %s was removed by %s", ticket,
                                partition, by)));
  }
}

void SchedulerImpl::ErasePartitionLocked(const std::string& name) { partitions_.Remove(name); }

}  // namespace ipupod::scheduler
