#include "client/cli/exit_codes.h"

#include "common/errors.h"
#include <sys/wait.h>

namespace ipupod::cli {
namespace {

int ExitCodeForDeviceError(const absl::Status& status, int fallback) {
  // Only an explicit kind payload counts: GetErrorKind reads an unclassified
  // status as kApplication, which must keep its code's exit code.
  if (!status.GetPayload(kErrorKindPayload)) return fallback;
  switch (GetErrorKind(status)) {
    case ErrorKind::kUnrecoverable:
      return kExitUnrecoverable;
    case ErrorKind::kRecoverable:
      switch (GetRecoveryAction(status)) {
        case RecoveryAction::kIpuReset:
          return kExitIpuReset;
        case RecoveryAction::kLinkReset:
          return kExitLinkReset;
        case RecoveryAction::kPartitionReset:
          return kExitPartitionReset;
        case RecoveryAction::kFullReset:
          return kExitFullReset;
        case RecoveryAction::kNone:
          return fallback;
      }
      return fallback;
    case ErrorKind::kApplication:
    case ErrorKind::kNone:
      return fallback;
  }
  return fallback;
}

int ExitCodeForCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return kExitPermission;
    case absl::StatusCode::kResourceExhausted:
      return kExitResourceExhausted;
    case absl::StatusCode::kDeadlineExceeded:
      return kExitDeadlineExceeded;
    case absl::StatusCode::kFailedPrecondition:
      return kExitFailedPrecondition;
    case absl::StatusCode::kUnavailable:
      return kExitUnavailable;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return kExitInvalidArgument;
    case absl::StatusCode::kAlreadyExists:
      return kExitAlreadyExists;
    case absl::StatusCode::kAborted:
      return kExitAborted;
    // DATA_LOSS is how the server reports an unrecoverable device fault.
    case absl::StatusCode::kDataLoss:
      return kExitUnrecoverable;
    // The client only cancels when it was interrupted.
    case absl::StatusCode::kCancelled:
      return kExitInterrupted;
    default:
      return kExitOther;
  }
}

}  // namespace

int ExitCodeForStatus(const absl::Status& status) {
  if (status.ok()) return kExitOk;
  return ExitCodeForDeviceError(status, ExitCodeForCode(status.code()));
}

int ExitCodeForJobState(v1::JobState state) {
  switch (state) {
    case v1::COMPLETED:
      return kExitOk;
    case v1::FAILED:
      return kExitJobFailed;
    case v1::CANCELLED:
      return kExitJobCancelled;
    case v1::TIMEOUT:
      return kExitJobTimeout;
    default:
      return kExitJobNotFinished;
  }
}

int ExitCodeForWaitStatus(int wait_status) {
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  return kExitOther;
}

}  // namespace ipupod::cli
