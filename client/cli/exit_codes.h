// File: client/cli/exit_codes.h
//
// Exit codes of the `ipupod` CLI. They are part of its user contract
// (scripts branch on them), so codes are only ever added, never renumbered.
//
//   code  meaning                                   from
//   ----  ----------------------------------------  ---------------------------------
//     0   success
//     1   other or internal error                   UNKNOWN, INTERNAL, UNIMPLEMENTED, ...;
//                                                   an exception escaping a command
//                                                   (RunGuarded: std::bad_alloc, ...)
//     2   usage error (bad command line)            parse errors, bad numbers
//     3   not found                                 NOT_FOUND
//     4   not allowed / not authenticated           PERMISSION_DENIED, UNAUTHENTICATED
//     5   nothing free now, or a bound reached      RESOURCE_EXHAUSTED
//     6   timed out                                 DEADLINE_EXCEEDED
//     7   fix the system state first                FAILED_PRECONDITION
//     8   server unreachable / went away; retry     UNAVAILABLE
//     9   bad request value                         INVALID_ARGUMENT, OUT_OF_RANGE
//    10   already exists                            ALREADY_EXISTS
//    11   session ended by someone else             ABORTED without a device error kind
//    12   the model does not compile                compile/run: INVALID_ARGUMENT from the
//                                                   compiler (placement, run shape, out of
//                                                   IPU memory); chosen by the command
//    20   recoverable device error: IPU_RESET       kind recoverable, action IPU_RESET
//    21   recoverable device error: LINK_RESET      kind recoverable, action LINK_RESET
//    22   recoverable device error: PARTITION_RESET kind recoverable, action PARTITION_RESET
//    23   recoverable device error: FULL_RESET      kind recoverable, action FULL_RESET
//    24   unrecoverable device error                kind unrecoverable (or DATA_LOSS)
//    30   `job wait`: the job ended FAILED           JobState FAILED
//    31   `job wait`: the job ended CANCELLED        JobState CANCELLED
//    32   `job wait`: the job ended TIMEOUT          JobState TIMEOUT (its --time-limit)
//    33   `job wait --timeout`: the wait ran out     still PENDING or RUNNING
//         before the job finished
//   130   interrupted (SIGINT/SIGTERM while waiting) CANCELLED
//
// `ipupod job wait` exits 0 when the job COMPLETED and 30-33 as above; an
// error of the wait itself (no such job, server unreachable) has its
// status's code.
//
// `ipupod attach ... -- COMMAND` exits with COMMAND's own exit code (128 +
// signal number when it was killed by a signal; 127 when COMMAND was not
// found, 126 when it could not be run, as shells do), unless the session
// ended under it, in which case the code of that error is used.
//
// Thread safety: pure functions.
#ifndef IPUPOD_CLIENT_CLI_EXIT_CODES_H_
#define IPUPOD_CLIENT_CLI_EXIT_CODES_H_

#include "absl/status/status.h"
#include "ipupod/v1/jobs.pb.h"

namespace ipupod::cli {

namespace v1 = ::ipupod::v1;

enum ExitCode : int {
  kExitOk = 0,
  kExitOther = 1,
  kExitUsage = 2,
  kExitNotFound = 3,
  kExitPermission = 4,
  kExitResourceExhausted = 5,
  kExitDeadlineExceeded = 6,
  kExitFailedPrecondition = 7,
  kExitUnavailable = 8,
  kExitInvalidArgument = 9,
  kExitAlreadyExists = 10,
  kExitAborted = 11,
  kExitCompileError = 12,
  kExitIpuReset = 20,
  kExitLinkReset = 21,
  kExitPartitionReset = 22,
  kExitFullReset = 23,
  kExitUnrecoverable = 24,
  kExitJobFailed = 30,
  kExitJobCancelled = 31,
  kExitJobTimeout = 32,
  kExitJobNotFinished = 33,
  kExitInterrupted = 130,
};

// The exit code for a (client-converted) status; device-error payloads take
// precedence over the status code.
int ExitCodeForStatus(const absl::Status& status);

// `job wait`: 0 for COMPLETED, 30-32 for the other final states, 33 for a
// job that has not finished (PENDING, RUNNING, or a state this CLI does not
// know).
int ExitCodeForJobState(v1::JobState state);

// 128 + signal for a child killed by a signal, its exit status otherwise;
// `wait_status` as waitpid() returns it.
int ExitCodeForWaitStatus(int wait_status);

}  // namespace ipupod::cli

#endif  // IPUPOD_CLIENT_CLI_EXIT_CODES_H_
