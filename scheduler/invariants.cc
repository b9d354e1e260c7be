// The pod's invariants: those of each part (their headers) and those between
// the parts and the IPUs (scheduler_impl.h CheckPodInvariants), checked by
// every mutating call in builds with IPUPOD_DCHECK on (MutationLock).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "scheduler/scheduler_impl.h"

namespace ipupod::scheduler {
namespace {

using device::Block;
using device::IpuState;

// An IPU is attached exactly when a session holds it; allocatable exactly
// when idle and held by none.
absl::Status CheckIpus(const std::vector<device::Ipu>& ipus, const SessionTable& sessions) {
  for (const device::Ipu& ipu : ipus) {
    const std::string& holder = sessions.HolderOf(ipu.id());
    if (ipu.attached() != !holder.empty()) {
      return absl::InternalError(absl::StrCat("IPU ", ipu.id(), " is ",
                                              ipu.attached() ? "attached" : "not attached",
                                              " but held by '", holder, "'"));
    }
    const bool free = ipu.state() == IpuState::kIdle && holder.empty();
    if (ipu.Allocatable() != free) {
      return absl::InternalError(
          absl::StrCat("IPU ", ipu.id(), " is ", device::IpuStateName(ipu.state()), ", held by '",
                       holder, "', yet ", ipu.Allocatable() ? "allocatable" : "not allocatable"));
    }
  }
  return absl::OkStatus();
}

// A session's block lies in its partition, or in no partition for the pool.
absl::Status CheckSessionPools(const SessionTable& sessions, const PartitionTable& partitions) {
  for (const auto& [id, s] : sessions.all()) {
    const IpuMask block = MaskOf(s.block);
    if (s.partition.empty()) {
      if ((block & partitions.Partitioned()).any()) {
        return absl::InternalError(absl::StrCat("pool session ", id, " holds partitioned IPUs ",
                                                FormatIpus(block & partitions.Partitioned())));
      }
      continue;
    }
    const Partition* p = partitions.Find(s.partition);
    if (p == nullptr || !IsAlignedIn(s.block, p->block)) {
      return absl::InternalError(
          absl::StrCat("session ", id, " is not inside its partition ", s.partition));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckWaiters(const SessionTable& sessions, const PartitionTable& partitions,
                          const WaitQueue& queue) {
  for (const Waiter* w : queue.All()) {
    if (sessions.IdOfTicket(w->ticket) != nullptr) {
      return absl::InternalError(absl::StrCat("ticket ", w->ticket, " both waits and holds ",
                                              *sessions.IdOfTicket(w->ticket)));
    }
    if (!w->partition.empty() && partitions.Find(w->partition) == nullptr) {
      return absl::InternalError(absl::StrCat("waiter ", w->ticket, " waits for partition ",
                                              w->partition, " that is gone"));
    }
  }
  return absl::OkStatus();
}

// A covered IPU is resetting; while the book is open, a resetting IPU is
// covered (Close leaves its IPUs kResetting: reset_book.h).
absl::Status CheckResets(const std::vector<device::Ipu>& ipus, const ResetBook& resets) {
  for (const device::Ipu& ipu : ipus) {
    const bool resetting = ipu.state() == IpuState::kResetting;
    const uint64_t covering = resets.CoveringReset(ipu.id());
    if (covering != 0 && !resetting) {
      return absl::InternalError(absl::StrCat("IPU ", ipu.id(), " is covered by reset ", covering,
                                              " but is ", device::IpuStateName(ipu.state())));
    }
    if (covering == 0 && resetting && !resets.closed()) {
      return absl::InternalError(
          absl::StrCat("IPU ", ipu.id(), " is resetting but no pending reset covers it"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckPodInvariants(const std::vector<device::Ipu>& ipus, const SessionTable& sessions,
                                const PartitionTable& partitions, const WaitQueue& queue,
                                const ResetBook& resets) {
  IPUPOD_RETURN_IF_ERROR(sessions.CheckInvariants());
  IPUPOD_RETURN_IF_ERROR(partitions.CheckInvariants());
  IPUPOD_RETURN_IF_ERROR(queue.CheckInvariants());
  IPUPOD_RETURN_IF_ERROR(resets.CheckInvariants());
  IPUPOD_RETURN_IF_ERROR(CheckIpus(ipus, sessions));
  IPUPOD_RETURN_IF_ERROR(CheckResets(ipus, resets));
  IPUPOD_RETURN_IF_ERROR(CheckSessionPools(sessions, partitions));
  return CheckWaiters(sessions, partitions, queue);
}

absl::Status SchedulerImpl::CheckInvariants() const {
  sync::MutexLock lock(&mu_);
  return CheckPodInvariants(ipus_, sessions_, partitions_, queue_, resets_);
}

SchedulerImpl::MutationLock::MutationLock(SchedulerImpl* scheduler) : scheduler_(scheduler) {
  scheduler_->mu_.Lock();
  sync::Acquired(&scheduler_->mu_);
}

SchedulerImpl::MutationLock::~MutationLock() {
  scheduler_->mu_.AssertHeld();
  if (IPUPOD_DCHECK_IS_ON || scheduler_->options_.check_invariants) {
    IPUPOD_CHECK_OK(CheckPodInvariants(scheduler_->ipus_, scheduler_->sessions_,
                                       scheduler_->partitions_, scheduler_->queue_,
                                       scheduler_->resets_))
        << "after a change to the pod's state";
  }
  sync::Released(&scheduler_->mu_);
  scheduler_->mu_.Unlock();
}

}  // namespace ipupod::scheduler
