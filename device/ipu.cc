#include "device/ipu.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace ipupod::device {
namespace {

// What a user types to clear `action` on `ipu`. The IPU does not know its
// partition or session, so the wider resets name the command family; the
// scheduler builds sharper messages where it knows more.
std::string RecoveryCommand(RecoveryAction action, int ipu) {
  switch (action) {
    case RecoveryAction::kIpuReset:
      return absl::StrFormat("ipupod ipu reset %d", ipu);
    case RecoveryAction::kLinkReset:
    case RecoveryAction::kPartitionReset:
      return "ipupod partition reset <name> or ipupod session reset <id>";
    case RecoveryAction::kFullReset:
      return "an admin runs ipupod pod reset";
    case RecoveryAction::kNone:
      break;
  }
  return "";
}

}  // namespace

absl::string_view IpuStateName(IpuState state) {
  switch (state) {
    case IpuState::kIdle:
      return "idle";
    case IpuState::kAttached:
      return "attached";
    case IpuState::kBusy:
      return "busy";
    case IpuState::kError:
      return "error";
    case IpuState::kResetting:
      return "resetting";
    case IpuState::kFailed:
      return "failed";
  }
  return "";
}

Ipu::Ipu(int id, const IpuSpec& spec) : id_(id), spec_(&spec) {}

absl::Status Ipu::Attach() {
  if (state_ != IpuState::kIdle) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "IPU %d is %s; only an idle IPU can be attached", id_, IpuStateName(state_)));
  }
  state_ = IpuState::kAttached;
  attached_ = true;
  return absl::OkStatus();
}

absl::Status Ipu::Detach() {
  if (!attached_) {
    return absl::FailedPreconditionError(absl::StrFormat("IPU %d is not attached", id_));
  }
  attached_ = false;
  memory_used_ = 0;
  // kError, kResetting and kFailed keep their state; EndReset/Repair now lead to kIdle.
  if (state_ == IpuState::kAttached || state_ == IpuState::kBusy) state_ = IpuState::kIdle;
  return absl::OkStatus();
}

absl::Status Ipu::BeginOperation() {
  if (state_ == IpuState::kAttached) {
    state_ = IpuState::kBusy;
    return absl::OkStatus();
  }
  absl::Status health = HealthStatus();
  if (!health.ok()) return health;
  return absl::FailedPreconditionError(absl::StrFormat(
      "IPU %d is %s; an operation needs an attached, idle IPU", id_, IpuStateName(state_)));
}

void Ipu::EndOperation() {
  if (state_ == IpuState::kBusy) state_ = IpuState::kAttached;
}

void Ipu::Fault(RecoveryAction action) {
  // A failed IPU is beyond recoverable faults, and a resetting one is being
  // cleared already (the table in ipu.h: kResetting leaves only by EndReset/Fail).
  if (state_ == IpuState::kFailed || state_ == IpuState::kResetting) return;
  if (action == RecoveryAction::kNone) return;
  action_ = state_ == IpuState::kError ? std::max(action_, action) : action;
  state_ = IpuState::kError;
}

void Ipu::Fail(absl::string_view reason) {
  state_ = IpuState::kFailed;
  action_ = RecoveryAction::kNone;
  failure_reason_ = std::string(reason);
  memory_used_ = 0;
}

absl::Status Ipu::BeginReset(RecoveryAction level) {
  if (level == RecoveryAction::kNone) {
    return absl::InvalidArgumentError("a reset needs a level (IPU_RESET or above)");
  }
  if (state_ == IpuState::kFailed || state_ == IpuState::kResetting) {
    return absl::FailedPreconditionError(
        absl::StrFormat("IPU %d is %s; it cannot be reset now", id_, IpuStateName(state_)));
  }
  if (state_ == IpuState::kError && action_ > level) {
    return absl::FailedPreconditionError(absl::StrFormat("IPU %d needs %s; a %s does not clear it",
                                                         id_, RecoveryActionName(action_),
                                                         RecoveryActionName(level)));
  }
  state_ = IpuState::kResetting;
  action_ = RecoveryAction::kNone;
  memory_used_ = 0;
  return absl::OkStatus();
}

void Ipu::EndReset() {
  if (state_ != IpuState::kResetting) return;
  state_ = attached_ ? IpuState::kAttached : IpuState::kIdle;
  memory_used_ = 0;
}

absl::Status Ipu::Repair() {
  if (state_ != IpuState::kFailed) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "IPU %d is %s, not failed; only a failed IPU can be repaired", id_, IpuStateName(state_)));
  }
  state_ = attached_ ? IpuState::kAttached : IpuState::kIdle;
  failure_reason_.clear();
  memory_used_ = 0;
  return absl::OkStatus();
}

absl::Status Ipu::Allocate(uint64_t bytes) {
  const uint64_t free_bytes = memory_total_bytes() - memory_used_;
  if (bytes > free_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("IPU %d is out of memory: %d bytes requested, %d of %d bytes free", id_,
                        bytes, free_bytes, memory_total_bytes()));
  }
  memory_used_ += bytes;
  return absl::OkStatus();
}

void Ipu::Free(uint64_t bytes) { memory_used_ -= std::min(bytes, memory_used_); }

absl::Status Ipu::HealthStatus() const {
  switch (state_) {
    case IpuState::kError:
      return RecoverableError(
          action_, {id_},
          absl::StrFormat("IPU %d has a recoverable error: run %s (%s)", id_,
                          RecoveryActionName(action_), RecoveryCommand(action_, id_)));
    case IpuState::kResetting:
      return absl::UnavailableError(absl::StrFormat("IPU %d is resetting; retry in a moment", id_));
    case IpuState::kFailed:
      return UnrecoverableError(
          {id_}, absl::StrFormat("IPU %d failed: %s; it is out of service until an admin "
                                 "runs `ipupod ipu repair %d`",
                                 id_, failure_reason_, id_));
    default:
      return absl::OkStatus();
  }
}

}  // namespace ipupod::device
