// File: client/training_recovery.h
//
// Going on with training after a recoverable device fault, without losing
// anything the user holds on the host.
//
// A fault on a session's IPUs fails the step it hits with ABORTED, the
// error kind "recoverable" and a recovery action (common/errors.h); the
// server has then cleared what was loaded. The documented way on:
//
//   runtime::NamedTensors last = *client.ReadCheckpoint(session);  // host copy
//   for (...) {
//     absl::StatusOr<RunResult> r = client.Run(session, inputs);
//     if (!r.ok() && IsRecoverableFault(r.status())) {
//       IPUPOD_RETURN_IF_ERROR(ResumeTraining(client, session, sha256, last, r.status()));
//       continue;  // repeat from the data position `last` was taken at
//     }
//     ...
//     if (time for a checkpoint) last = *client.ReadCheckpoint(session);
//   }
//
// ResumeTraining performs the recovery action on the session's IPUs
// (SessionService.ResetSession clears IPU_RESET, LINK_RESET and
// PARTITION_RESET), loads the executable again once the reset is over
// (retrying while the IPUs answer UNAVAILABLE, up to kResetWait) and
// writes the host copy back: weights, optimizer state and step. The steps since that copy are
// lost on the device and must be run again (the caller knows which data
// they took). `ipupod run --train --recover` does exactly this.
//
// Thread safety: as Client (one call at a time per session).
// Errors: FAILED_PRECONDITION (with the original error's message) when
// the fault is not recoverable here: an unrecoverable fault (the IPU leaves
// service; attach elsewhere and resume from the host copy) or FULL_RESET
// (an admin resets the pod); otherwise what ResetSession, Load or
// WriteWeights return. The host copy is never modified.
#ifndef IPUPOD_CLIENT_TRAINING_RECOVERY_H_
#define IPUPOD_CLIENT_TRAINING_RECOVERY_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "runtime/tensor_files.h"

namespace ipupod::client {

inline constexpr absl::Duration kResetWait = absl::Seconds(30);

// True for an error ResumeTraining can act on.
bool IsRecoverableFault(const absl::Status& error);

// `sha256` names the executable (already in the server's cache);
// `checkpoint` is what Client::ReadCheckpoint returned.
absl::Status ResumeTraining(Client& client, absl::string_view session, absl::string_view sha256,
                            const runtime::NamedTensors& checkpoint, const absl::Status& error);

}  // namespace ipupod::client

#endif  // IPUPOD_CLIENT_TRAINING_RECOVERY_H_
