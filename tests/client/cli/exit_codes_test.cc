#include "client/cli/exit_codes.h"

#include <gtest/gtest.h>

#include "common/errors.h"
#include <signal.h>
#include <sys/wait.h>

namespace ipupod::cli {
namespace {

TEST(ExitCodesTest, StatusCodesMapToTheDocumentedTable) {
  EXPECT_EQ(ExitCodeForStatus(absl::OkStatus()), 0);
  EXPECT_EQ(ExitCodeForStatus(absl::UnknownError("x")), 1);
  EXPECT_EQ(ExitCodeForStatus(absl::InternalError("x")), 1);
  EXPECT_EQ(ExitCodeForStatus(absl::NotFoundError("x")), 3);
  EXPECT_EQ(ExitCodeForStatus(absl::PermissionDeniedError("x")), 4);
  EXPECT_EQ(ExitCodeForStatus(absl::UnauthenticatedError("x")), 4);
  EXPECT_EQ(ExitCodeForStatus(absl::ResourceExhaustedError("x")), 5);
  EXPECT_EQ(ExitCodeForStatus(absl::DeadlineExceededError("x")), 6);
  EXPECT_EQ(ExitCodeForStatus(absl::FailedPreconditionError("x")), 7);
  EXPECT_EQ(ExitCodeForStatus(absl::UnavailableError("x")), 8);
  EXPECT_EQ(ExitCodeForStatus(absl::InvalidArgumentError("x")), 9);
  EXPECT_EQ(ExitCodeForStatus(absl::OutOfRangeError("x")), 9);
  EXPECT_EQ(ExitCodeForStatus(absl::AlreadyExistsError("x")), 10);
  EXPECT_EQ(ExitCodeForStatus(absl::AbortedError("detached by admin")), 11);
  EXPECT_EQ(ExitCodeForStatus(absl::CancelledError("interrupted")), 130);
}

TEST(ExitCodesTest, DeviceErrorsMapByKindAndAction) {
  EXPECT_EQ(ExitCodeForStatus(RecoverableError(RecoveryAction::kIpuReset, {1}, "x")), 20);
  EXPECT_EQ(ExitCodeForStatus(RecoverableError(RecoveryAction::kLinkReset, {1}, "x")), 21);
  EXPECT_EQ(ExitCodeForStatus(RecoverableError(RecoveryAction::kPartitionReset, {1}, "x")), 22);
  EXPECT_EQ(ExitCodeForStatus(RecoverableError(RecoveryAction::kFullReset, {1}, "x")), 23);
  EXPECT_EQ(ExitCodeForStatus(UnrecoverableError({1}, "x")), 24);
  EXPECT_EQ(ExitCodeForStatus(absl::DataLossError("no payload")), 24);
  // An explicit application kind keeps the code's exit code.
  EXPECT_EQ(ExitCodeForStatus(AsApplicationError(absl::InvalidArgumentError("x"))), 9);
  EXPECT_EQ(ExitCodeForStatus(AsApplicationError(absl::AbortedError("x"))), 11);
}

TEST(ExitCodesTest, EachFinalJobStateHasItsOwnCode) {
  EXPECT_EQ(ExitCodeForJobState(v1::COMPLETED), 0);
  EXPECT_EQ(ExitCodeForJobState(v1::FAILED), 30);
  EXPECT_EQ(ExitCodeForJobState(v1::CANCELLED), 31);
  EXPECT_EQ(ExitCodeForJobState(v1::TIMEOUT), 32);
  // Not finished: the wait ran out first.
  EXPECT_EQ(ExitCodeForJobState(v1::PENDING), 33);
  EXPECT_EQ(ExitCodeForJobState(v1::RUNNING), 33);
  EXPECT_EQ(ExitCodeForJobState(v1::JOB_STATE_UNSPECIFIED), 33);
  EXPECT_EQ(ExitCodeForJobState(static_cast<v1::JobState>(99)), 33) << "a state added later";
  // None collides with a status's code.
  for (int code : {30, 31, 32, 33}) {
    for (int s = 0; s <= 16; ++s) {
      EXPECT_NE(ExitCodeForStatus(absl::Status(static_cast<absl::StatusCode>(s), "x")), code);
    }
  }
}

TEST(ExitCodesTest, WaitStatusGivesExitCodeOr128PlusSignal) {
  EXPECT_EQ(ExitCodeForWaitStatus(7 << 8), 7);  // WIFEXITED, status 7
  EXPECT_EQ(ExitCodeForWaitStatus(SIGKILL), 128 + SIGKILL);
  EXPECT_EQ(ExitCodeForWaitStatus(SIGINT), 130);
}

}  // namespace
}  // namespace ipupod::cli
