// File: server/batch/in_process_executable.h
//
// InProcessSessionExecutable: driver::SessionExecutable for the server's
// batch jobs, over execution::SessionExecution - the same operations,
// ownership checks, fault draws, memory charges and compute gate as the
// gRPC ExecutionService gives an interactive client, without a transport.
// So a job runs the very loop, host copies and recovery of `ipupod run`
// (common/driver/training_driver.h, common/driver/inference_driver.h).
//
// Each method is one operation on the session (server/execution/session_execution.h).
// Load waits while the session's IPUs are resetting (UNAVAILABLE), up to
// reset_wait; Reset performs a recoverable fault's action (ResetSession),
// or, for FULL_RESET, waits up to full_reset_wait for an admin's pod reset.
//
// Thread safety: one call at a time (common/driver/session_executable.h).
// Errors: those of SessionExecution and the Program, unchanged (device
// errors keep their kind and action payloads); CANCELLED when `cancelled`
// said so; DEADLINE_EXCEEDED when a reset did not finish in time.
#ifndef IPUPOD_BATCH_IN_PROCESS_EXECUTABLE_H_
#define IPUPOD_BATCH_IN_PROCESS_EXECUTABLE_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/driver/session_executable.h"
#include "common/tensor/tensor_files.h"
#include "scheduler/scheduler.h"
#include "server/execution/session_execution.h"

namespace ipupod::batch {

using InProcessOptions = driver::ResetWaits;

class InProcessSessionExecutable : public driver::SessionExecutable {
 public:
  // `sha256`: the executable's cache key (its content hash), in the cache
  // for caller.user. Borrows `execution` for its lifetime.
  InProcessSessionExecutable(execution::SessionExecution& execution, scheduler::Caller caller,
                             std::string session, std::string sha256,
                             execution::Cancelled cancelled, InProcessOptions options = {});

  std::string session() const override { return session_; }
  absl::Status Load() override;
  absl::Status WriteWeights(const tensor::NamedTensors& weights) override;
  absl::StatusOr<tensor::NamedTensors> ReadWeights() override;
  absl::StatusOr<tensor::NamedTensors> ReadCheckpoint() override;
  absl::StatusOr<std::string> SetOptimizer(const std::map<std::string, double>& variables) override;
  absl::StatusOr<driver::StepResult> RunStep(const tensor::NamedTensors& inputs) override;
  absl::Status Reset(const absl::Status& fault) override;

  // The weight names the loaded program takes (after Load).
  absl::StatusOr<std::vector<std::string>> WeightNames();

 private:
  absl::Status LoadOnce();
  absl::Status WaitForPodReset(const absl::Status& fault);
  absl::Status ResetSession();
  // Counts what a read of weights moved (server/execution/execution_counters.h).
  absl::StatusOr<tensor::NamedTensors> CountedRead(absl::StatusOr<tensor::NamedTensors> weights);

  execution::SessionExecution& execution_;
  const scheduler::Caller caller_;
  const std::string session_;
  const std::string sha256_;
  const execution::Cancelled cancelled_;
  const InProcessOptions options_;
};

}  // namespace ipupod::batch

#endif  // IPUPOD_BATCH_IN_PROCESS_EXECUTABLE_H_
