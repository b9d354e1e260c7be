// Faults, resets and repairs. A reset is checked over its whole scope first
// and only then applied (atomic); its IPUs stay kResetting for the configured
// wall time, which also serves as the modelled duration.
#include <algorithm>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "scheduler/pod_events.h"
#include "scheduler/scheduler_impl.h"
#include "spdlog/spdlog.h"

namespace ipupod::scheduler {
namespace {

using device::Block;
using device::IpuState;

RecoveryAction ActionOf(FaultKind kind) {
  switch (kind) {
    case FaultKind::kIpuReset:
      return RecoveryAction::kIpuReset;
    case FaultKind::kLinkReset:
      return RecoveryAction::kLinkReset;
    case FaultKind::kPartitionReset:
      return RecoveryAction::kPartitionReset;
    case FaultKind::kFullReset:
      return RecoveryAction::kFullReset;
    case FaultKind::kUnrecoverable:
      break;
  }
  return RecoveryAction::kNone;
}

bool KnownKind(FaultKind kind) {
  return kind == FaultKind::kUnrecoverable || ActionOf(kind) != RecoveryAction::kNone;
}

// Runs `done` for a reset that did not go to the timer. REQUIRES: no lock held.
void Deliver(const ResetStart& start, ResetDone& done) {
  if (!done) return;
  if (!start.ok()) {
    done(start.status());
  } else if (start->has_value()) {
    done(**start);
  }
}

}  // namespace

// ---------------------------------------------------------------- faults

absl::StatusOr<FaultResult> SchedulerImpl::InjectFault(const Caller& caller, int ipu,
                                                       FaultKind kind) {
  MutationLock lock(this);
  IPUPOD_RETURN_IF_ERROR(CheckRunningLocked());
  if (!caller.admin) return absl::PermissionDeniedError("only an admin may inject faults");
  IPUPOD_RETURN_IF_ERROR(CheckIpuId(ipu));
  if (!KnownKind(kind)) return absl::InvalidArgumentError("unknown fault kind");
  IPUPOD_ASSIGN_OR_RETURN(
      FaultResult result,
      ApplyFaultLocked(ipu, kind, absl::StrFormat("fault injected by %s", caller.user)));
  if (options_.events != nullptr) {
    options_.events->OnFault(FaultEvent{ipu, kind, false, result.affected_ipus,
                                        result.affected_sessions, caller.user,
                                        absl::ToUnixMillis(Now())});
  }
  return result;
}

IpuMask SchedulerImpl::FaultScopeLocked(int ipu, FaultKind kind) const {
  const Session* s = SessionOfIpuLocked(ipu);
  switch (kind) {
    case FaultKind::kLinkReset:  // the IPU and the rest of its session's links
      return s != nullptr ? MaskOf(s->block) : MaskOf(Block{ipu, 1});
    case FaultKind::kPartitionReset:
      if (!partitions_.NameOf(ipu).empty())
        return MaskOf(partitions_.at(partitions_.NameOf(ipu)).block);
      return s != nullptr ? MaskOf(s->block) : MaskOf(Block{ipu, 1});
    case FaultKind::kFullReset:
      return PodMask();
    default:
      return MaskOf(Block{ipu, 1});
  }
}

absl::StatusOr<FaultResult> SchedulerImpl::ApplyFaultLocked(int ipu, FaultKind kind,
                                                            absl::string_view reason) {
  FaultResult result;
  if (kind == FaultKind::kUnrecoverable) {
    if (ipus_[ipu].state() != IpuState::kFailed) {
      if (store_ != nullptr) {
        IPUPOD_RETURN_IF_ERROR(store_->PutFailure(StoredFailure{ipu, std::string(reason)}));
      }
      ipus_[ipu].Fail(reason);
      // A failed IPU leaves its reset: repaired, it may be reset anew, and
      // only that reset may end it (reset_book.h).
      resets_.Uncover(ipu);
      result.affected_ipus.push_back(ipu);
      // Its memory is gone, so the session's program is too.
      if (Session* s = sessions_.SessionOf(ipu)) ClearLoadLocked(*s);
    }
  } else {
    for (int i : IpusOf(FaultScopeLocked(ipu, kind))) {
      const IpuState state = ipus_[i].state();
      if (state == IpuState::kFailed || state == IpuState::kResetting) continue;
      ipus_[i].Fault(ActionOf(kind));
      result.affected_ipus.push_back(i);
    }
  }
  std::set<std::string> sessions;
  for (int i : result.affected_ipus) {
    if (!sessions_.HolderOf(i).empty()) sessions.insert(sessions_.HolderOf(i));
  }
  result.affected_sessions.assign(sessions.begin(), sessions.end());
  const std::string what = kind == FaultKind::kUnrecoverable
                               ? std::string("unrecoverable fault")
                               : std::string(RecoveryActionName(ActionOf(kind)));
  spdlog::info("scheduler: {} on IPU {} ({}): IPUs [{}] affected", what, ipu, std::string(reason),
               absl::StrJoin(result.affected_ipus, ","));
  return result;
}

void SchedulerImpl::MaybeRandomFaultLocked(const Session& s) {
  const RandomFaults& rf = options_.random_faults;
  if (rf.probability_per_operation <= 0 || rf.kinds.empty()) return;
  // Drawn by hand from the 64-bit engine so that a seed gives the same faults
  // with any standard library (distributions are implementation-defined).
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  if (u >= rf.probability_per_operation) return;
  const FaultKind kind = rf.kinds[rng_() % rf.kinds.size()];
  const int ipu = s.block.start + static_cast<int>(rng_() % static_cast<uint64_t>(s.block.size));
  absl::StatusOr<FaultResult> applied =
      ApplyFaultLocked(ipu, kind, absl::StrFormat("random fault (seed %d)", rf.seed));
  if (!applied.ok()) {
    spdlog::warn("scheduler: random fault not applied: {}",
                 std::string(applied.status().message()));
  } else if (options_.events != nullptr) {
    options_.events->OnFault(FaultEvent{ipu, kind, true, applied->affected_ipus,
                                        applied->affected_sessions, "", absl::ToUnixMillis(Now())});
  }
}

// ---------------------------------------------------------------- resets

std::string SchedulerImpl::ClearCommandLocked(int ipu, RecoveryAction action) const {
  if (action == RecoveryAction::kIpuReset) return absl::StrFormat("run `ipupod ipu reset %d`", ipu);
  if (action == RecoveryAction::kFullReset) return "an admin must run `ipupod pod reset`";
  std::vector<std::string> commands;
  if (!partitions_.NameOf(ipu).empty()) {
    commands.push_back(absl::StrFormat("`ipupod partition reset %s`", partitions_.NameOf(ipu)));
  }
  if (!sessions_.HolderOf(ipu).empty()) {
    commands.push_back(absl::StrFormat("`ipupod session reset %s`", sessions_.HolderOf(ipu)));
  }
  if (commands.empty()) {
    return "it is in no partition or session, so an admin must run `ipupod pod reset`";
  }
  return absl::StrCat("run ", absl::StrJoin(commands, " or "));
}

absl::Status SchedulerImpl::CheckResetIpuLocked(const Caller& caller, int ipu) const {
  IPUPOD_RETURN_IF_ERROR(CheckIpuId(ipu));
  const Session* s = SessionOfIpuLocked(ipu);
  const std::string& partition = partitions_.NameOf(ipu);
  const std::string* partition_owner =
      partition.empty() ? nullptr : &partitions_.at(partition).owner;
  const bool allowed = caller.admin || (s == nullptr && partition_owner == nullptr) ||
                       (s != nullptr && s->user == caller.user) ||
                       (partition_owner != nullptr && *partition_owner == caller.user);
  if (!allowed) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "IPU %d is held by %s; only its session's owner, its partition's owner or an admin may "
        "reset it",
        ipu, DescribeOccupancyLocked(MaskOf(Block{ipu, 1}), true)));
  }
  const device::Ipu& d = ipus_[ipu];
  if (d.state() == IpuState::kFailed) {
    return absl::FailedPreconditionError(d.HealthStatus().message());
  }
  if (d.state() == IpuState::kResetting) {
    return absl::FailedPreconditionError(
        absl::StrFormat("IPU %d is already resetting; wait for the reset to finish", ipu));
  }
  if (d.state() == IpuState::kError && d.recovery_action() > RecoveryAction::kIpuReset) {
    return absl::FailedPreconditionError(
        absl::StrFormat("IPU %d needs %s: %s", ipu, RecoveryActionName(d.recovery_action()),
                        ClearCommandLocked(ipu, d.recovery_action())));
  }
  return absl::OkStatus();
}

ResetStart SchedulerImpl::StartResetLocked(const IpuMask& scope, RecoveryAction level,
                                           absl::Duration time, ResetDone* done) {
  std::vector<int> ipus;
  for (int i : IpusOf(scope)) {
    const device::Ipu& d = ipus_[i];
    if (d.state() == IpuState::kFailed || d.state() == IpuState::kResetting) continue;
    if (d.state() == IpuState::kError && d.recovery_action() > level) {
      return absl::FailedPreconditionError(
          absl::StrFormat("IPU %d needs %s: %s", i, RecoveryActionName(d.recovery_action()),
                          ClearCommandLocked(i, d.recovery_action())));
    }
    ipus.push_back(i);
  }
  if (ipus.empty()) return std::optional<ResetResult>(ResetResult{});
  const uint64_t id = resets_.NextId();
  IPUPOD_RETURN_IF_ERROR(timer_.Schedule(time, [this, id] { FinishReset(id); }).status());
  std::set<std::string> sessions;
  for (int i : ipus) {
    IPUPOD_CHECK_OK(ipus_[i].BeginReset(level)) << "checked above";
    Session* s = sessions_.SessionOf(i);
    if (s != nullptr && sessions.insert(s->id).second) {
      ClearLoadLocked(*s);  // the reset clears device memory
    }
  }
  PendingReset reset{ipus,
                     {sessions.begin(), sessions.end()},
                     absl::ToDoubleSeconds(time),
                     done != nullptr ? std::move(*done) : ResetDone()};
  if (options_.events != nullptr) {
    // Only the automatic reset (AutoResetLocked) has nobody to tell.
    options_.events->OnResetStarted(ResetEvent{level, done == nullptr, reset.ipus, reset.sessions,
                                               reset.simulated_seconds, absl::ToUnixMillis(Now())});
  }
  spdlog::info("scheduler: {} of IPUs [{}] started", std::string(RecoveryActionName(level)),
               absl::StrJoin(ipus, ","));
  resets_.Add(id, std::move(reset));
  return std::optional<ResetResult>();
}

// V-IPU resets a partition automatically when its job ends (auto-reset), so
// an IPU whose error a partition reset clears comes back by itself after a
// session ends; FULL_RESET errors wait for an admin, failed IPUs for repair.
void SchedulerImpl::AutoResetLocked(const std::vector<int>& ipus) {
  if (ipus.empty() || shutdown_) return;
  IpuMask scope;
  for (int i : ipus) scope.set(i);
  ResetStart start = StartResetLocked(scope, RecoveryAction::kPartitionReset,
                                      options_.partition_reset_time, nullptr);
  if (!start.ok())
    spdlog::warn("scheduler: auto-reset not started: {}", std::string(start.status().message()));
}

void SchedulerImpl::FinishReset(uint64_t reset_id) {
  const NotifyEndedOnExit notify(this);  // grants write the usage ledger
  ResetDone done;
  ResetResult result;
  {
    MutationLock lock(this);
    // Only the IPUs it still covers: one that failed meanwhile left it.
    const IpuMask covered = resets_.CoveredBy(reset_id);
    std::optional<PendingReset> reset = resets_.Take(reset_id);
    if (!reset) return;  // dropped by Shutdown
    for (int i : IpusOf(covered)) ipus_[i].EndReset();
    result = ResetResult{reset->ipus, reset->sessions, reset->simulated_seconds};
    done = std::move(reset->done);
    RunQueueLocked();
  }
  if (done) done(result);
}

void SchedulerImpl::ResetIpu(const Caller& caller, int ipu, ResetDone done) {
  ResetStart start;
  {
    MutationLock lock(this);
    absl::Status allowed = CheckRunningLocked();
    if (allowed.ok()) allowed = CheckResetIpuLocked(caller, ipu);
    start = allowed.ok() ? StartResetLocked(MaskOf(Block{ipu, 1}), RecoveryAction::kIpuReset,
                                            options_.ipu_reset_time, &done)
                         : ResetStart(allowed);
  }
  Deliver(start, done);
}

void SchedulerImpl::ResetPartition(const Caller& caller, absl::string_view name, ResetDone done) {
  ResetStart start;
  {
    MutationLock lock(this);
    absl::StatusOr<const Partition*> p = OwnPartitionLocked(caller, name, "reset");
    absl::Status allowed = CheckRunningLocked();
    if (allowed.ok()) allowed = p.status();
    start = allowed.ok() ? StartResetLocked(MaskOf((*p)->block), RecoveryAction::kPartitionReset,
                                            options_.partition_reset_time, &done)
                         : ResetStart(allowed);
  }
  Deliver(start, done);
}

void SchedulerImpl::ResetSession(const Caller& caller, absl::string_view session, ResetDone done) {
  ResetStart start;
  {
    MutationLock lock(this);
    absl::StatusOr<Session*> s = OwnSessionLocked(caller, session, "reset");
    absl::Status allowed = CheckRunningLocked();
    if (allowed.ok()) allowed = s.status();
    start = allowed.ok() ? StartResetLocked(MaskOf((*s)->block), RecoveryAction::kPartitionReset,
                                            options_.partition_reset_time, &done)
                         : ResetStart(allowed);
  }
  Deliver(start, done);
}

void SchedulerImpl::ResetPod(const Caller& caller, ResetDone done) {
  ResetStart start;
  {
    MutationLock lock(this);
    absl::Status allowed = CheckRunningLocked();
    if (allowed.ok() && !caller.admin) {
      allowed = absl::PermissionDeniedError("only an admin may reset the pod");
    }
    start = allowed.ok() ? StartResetLocked(PodMask(), RecoveryAction::kFullReset,
                                            options_.pod_reset_time, &done)
                         : ResetStart(allowed);
  }
  Deliver(start, done);
}

// ---------------------------------------------------------------- repair

absl::StatusOr<IpuView> SchedulerImpl::RepairIpu(const Caller& caller, int ipu) {
  const NotifyEndedOnExit notify(this);
  MutationLock lock(this);
  IPUPOD_RETURN_IF_ERROR(CheckRunningLocked());
  if (!caller.admin) return absl::PermissionDeniedError("only an admin may repair IPUs");
  IPUPOD_RETURN_IF_ERROR(CheckIpuId(ipu));
  if (ipus_[ipu].state() != IpuState::kFailed) return ipus_[ipu].Repair();  // FAILED_PRECONDITION
  if (store_ != nullptr) IPUPOD_RETURN_IF_ERROR(store_->DeleteFailure(ipu));
  IPUPOD_RETURN_IF_ERROR(ipus_[ipu].Repair());
  if (Session* s = sessions_.SessionOf(ipu)) ClearLoadLocked(*s);
  spdlog::info("scheduler: IPU {} repaired by {}", ipu, caller.user);
  if (options_.events != nullptr) {
    options_.events->OnRepaired(RepairEvent{ipu, caller.user, absl::ToUnixMillis(Now())});
  }
  RunQueueLocked();
  return IpuViewLocked(ipu);
}

}  // namespace ipupod::scheduler
