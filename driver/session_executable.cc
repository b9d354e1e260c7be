#include "driver/session_executable.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/errors.h"

namespace ipupod::driver {

bool IsRecoverableFault(const absl::Status& error) {
  return !error.ok() && GetErrorKind(error) == ErrorKind::kRecoverable &&
         GetRecoveryAction(error) != RecoveryAction::kNone;
}

absl::Status WithContext(const absl::Status& status, absl::string_view context) {
  absl::Status out(status.code(), absl::StrCat(context, ": ", status.message()));
  status.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

}  // namespace ipupod::driver
