#include "client/training_recovery.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/errors.h"
#include "common/status_macros.h"

namespace ipupod::client {

bool IsRecoverableFault(const absl::Status& error) {
  return !error.ok() && GetErrorKind(error) == ErrorKind::kRecoverable &&
         GetRecoveryAction(error) != RecoveryAction::kFullReset;
}

absl::Status ResumeTraining(Client& client, absl::string_view session, absl::string_view sha256,
                            const runtime::NamedTensors& checkpoint, const absl::Status& error) {
  if (!IsRecoverableFault(error)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot resume on session ", session, " after: ", error.message(),
                     GetErrorKind(error) == ErrorKind::kRecoverable
                         ? " (a FULL_RESET needs an admin: ipupod pod reset)"
                         : "",
                     "; the host copy of the training state is intact: attach again and resume "
                     "from it"));
  }
  IPUPOD_RETURN_IF_ERROR(client.ResetSession(session).status());
  // The IPUs stay in reset for a while (UNAVAILABLE); load once they are back.
  const absl::Time deadline = absl::Now() + kResetWait;
  absl::Status loaded = client.Load(session, sha256).status();
  while (absl::IsUnavailable(loaded) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
    loaded = client.Load(session, sha256).status();
  }
  IPUPOD_RETURN_IF_ERROR(loaded);
  return client.WriteWeights(session, checkpoint).status();
}

}  // namespace ipupod::client
