// File: client/session_executable.h
//
// RemoteSessionExecutable: driver::SessionExecutable over a Client, i.e. an
// executable already uploaded to ipupodd and loaded on a session's IPUs
// (common/driver/session_executable.h). With it the drivers of common/driver/ run against
// a remote server; `ipupod run` uses exactly this:
//
//   client::RemoteSessionExecutable executable(client, session, sha256);
//   driver::TrainingDriver trainer(executable, plan,
//                                  {.runs = 100, .host_copy_every = 1, .recover = true}, {});
//   IPUPOD_RETURN_IF_ERROR(trainer.Run());
//
// RunSteps (the inference driver's) overlaps steps on one Run stream: the
// next step's inputs, rows of the plan's tensors sent without a copy, go
// out while the current step computes.
//
// Reset performs a fault's recovery action:
//   * IPU_RESET, LINK_RESET, PARTITION_RESET: SessionService.ResetSession
//     (a partition-level reset of the session's IPUs clears all three);
//   * FULL_RESET: only an admin may reset the pod (`ipupod pod reset`), and
//     resetting every IPU of a shared pod is not a client's decision, so
//     Reset waits (up to RecoveryOptions::full_reset_wait, polling
//     GetSession) until an admin has reset the pod. A real FULL_RESET means
//     the same for the session as a partition reset: its IPUs come back
//     empty and the executable must be loaded again.
// Load retries while the IPUs are still resetting (UNAVAILABLE), up to
// RecoveryOptions::reset_wait.
//
// Thread safety: as Client, one call at a time per session.
// Errors: what the Client calls return (device-error payloads kept);
// FAILED_PRECONDITION from Reset for a fault that is not recoverable (an
// unrecoverable fault: the IPU left service; attach elsewhere and resume
// from the host copy); the FULL_RESET fault itself, with "waited ..." in
// its message, when no admin reset the pod in time.
#ifndef IPUPOD_CLIENT_SESSION_EXECUTABLE_H_
#define IPUPOD_CLIENT_SESSION_EXECUTABLE_H_

#include <map>
#include <string>

#include "absl/time/time.h"
#include "client/client.h"
#include "common/driver/session_executable.h"

namespace ipupod::client {

using RecoveryOptions = driver::ResetWaits;

// Converts the server's RunStats.
driver::StepStats StepStatsOf(const v1::RunStats& stats);

class RemoteSessionExecutable : public driver::SessionExecutable {
 public:
  // Borrows `client`. `sha256` names an executable the server holds.
  RemoteSessionExecutable(Client& client, std::string session, std::string sha256,
                          RecoveryOptions options = {});
  RemoteSessionExecutable(const RemoteSessionExecutable&) = delete;
  RemoteSessionExecutable& operator=(const RemoteSessionExecutable&) = delete;

  std::string session() const override { return session_; }
  absl::Status Load() override;
  absl::Status WriteWeights(const tensor::NamedTensors& weights) override;
  absl::StatusOr<tensor::NamedTensors> ReadWeights() override;
  absl::StatusOr<tensor::NamedTensors> ReadCheckpoint() override;
  absl::StatusOr<std::string> SetOptimizer(const std::map<std::string, double>& variables) override;
  absl::StatusOr<driver::StepResult> RunStep(const tensor::NamedTensors& inputs) override;
  // Every step on one Run stream (Client::RunSteps), the inputs sent
  // straight from `plan`'s tensors, at most two steps ahead.
  absl::Status RunSteps(const driver::StepPlan& plan, int64_t first, int64_t last,
                        const std::function<absl::Status(int64_t step, driver::StepResult result)>&
                            on_result) override;
  absl::Status Reset(const absl::Status& fault) override;

 private:
  absl::Status WaitForPodReset(const absl::Status& fault);

  Client& client_;
  const std::string session_;
  const std::string sha256_;
  const RecoveryOptions options_;
};

}  // namespace ipupod::client

#endif  // IPUPOD_CLIENT_SESSION_EXECUTABLE_H_
