// File: device/ipu.h
//
// One simulated IPU: its lifecycle state machine and its memory accounting.
//
//   state       meaning                                  leaves by
//   kIdle       healthy, in no session                    Attach, Fault, Fail
//   kAttached   in a session, not executing               BeginOperation, Detach, Fault, Fail
//   kBusy       in a session, executing an operation      EndOperation, Fault, Fail
//   kError      faulted; recovery_action() says what      BeginReset (at that level or above),
//               clears it; may also be attached           Detach (stays kError), Fault, Fail
//   kResetting  a reset is in progress                    EndReset (to kIdle or kAttached), Fail
//   kFailed     unrecoverable; never allocated            Repair (to kIdle)
//
// An IPU remembers whether it is attached through kError and kResetting, so a
// reset of an attached IPU returns it to kAttached. A second fault keeps the
// larger recovery action. Resetting clears the IPU's memory.
//
// Thread safety: none; the owner (scheduler::Scheduler) serialises access.
#ifndef IPUPOD_DEVICE_IPU_H_
#define IPUPOD_DEVICE_IPU_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/errors.h"
#include "device/hardware.h"

namespace ipupod::device {

enum class IpuState { kIdle, kAttached, kBusy, kError, kResetting, kFailed };

// "idle", "attached", "busy", "error", "resetting", "failed".
absl::string_view IpuStateName(IpuState state);

class Ipu {
 public:
  explicit Ipu(int id, const IpuSpec& spec = kGc200);

  int id() const { return id_; }
  IpuState state() const { return state_; }
  bool attached() const { return attached_; }
  // The action that clears a kError state; kNone in every other state.
  RecoveryAction recovery_action() const { return action_; }
  const std::string& failure_reason() const { return failure_reason_; }
  uint64_t memory_used_bytes() const { return memory_used_; }
  uint64_t memory_total_bytes() const { return spec_->memory_bytes; }
  // Healthy and unattached: may be granted to a session.
  bool Allocatable() const { return state_ == IpuState::kIdle; }

  // kIdle -> kAttached. FAILED_PRECONDITION from any other state.
  absl::Status Attach();
  // Leaves the session: kAttached/kBusy -> kIdle; kError stays kError with
  // attached() false; kResetting finishes into kIdle. Frees all memory.
  // FAILED_PRECONDITION when not attached.
  absl::Status Detach();
  // kAttached -> kBusy; a faulted IPU returns its device error.
  absl::Status BeginOperation();
  // kBusy -> kAttached (no-op in any other state: a fault may have landed).
  void EndOperation();

  // Recoverable fault: -> kError with max(current, action). Ignored when
  // kFailed. REQUIRES: action != kNone.
  void Fault(RecoveryAction action);
  // Unrecoverable fault: -> kFailed (memory cleared, stays attached if it was).
  void Fail(absl::string_view reason);
  // Starts a reset at `level`. FAILED_PRECONDITION when the IPU's error needs
  // a larger reset or when the IPU is kFailed or already kResetting.
  absl::Status BeginReset(RecoveryAction level);
  // kResetting -> kAttached or kIdle; memory cleared.
  void EndReset();
  // kFailed -> kIdle (or kAttached if still in a session).
  absl::Status Repair();

  // Memory accounting. RESOURCE_EXHAUSTED when `bytes` do not fit.
  absl::Status Allocate(uint64_t bytes);
  void Free(uint64_t bytes);

  // The device error a session sees on this IPU, or OK when it is usable.
  absl::Status HealthStatus() const;

 private:
  int id_;
  const IpuSpec* spec_;
  IpuState state_ = IpuState::kIdle;
  bool attached_ = false;
  RecoveryAction action_ = RecoveryAction::kNone;
  std::string failure_reason_;
  uint64_t memory_used_ = 0;
};

}  // namespace ipupod::device

#endif  // IPUPOD_DEVICE_IPU_H_
