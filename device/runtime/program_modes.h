// File: device/runtime/program_modes.h
//
// The two implementations of runtime::Program (internal to device/runtime/) and
// what their factories share. Program::Create picks one by the
// executable's mode:
//   CreateInferenceProgram  device/runtime/inference_program.cc: a
//                           graph::Interpreter over the folded model
//   CreateTrainingProgram   device/runtime/training_program.cc: a
//                           training::Trainer (device/runtime/training_step.h)
// Both import the model with ImportForProgram, which checks the
// executable's records against it, and build their step time from
// MicroBatchesTime and PipelineCycleSeconds.
//
// Thread safety: pure functions.
// Errors: INVALID_ARGUMENT (BadExecutable) when the executable does not
// match its model; recompiling fixes it.
#ifndef IPUPOD_RUNTIME_PROGRAM_MODES_H_
#define IPUPOD_RUNTIME_PROGRAM_MODES_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/compiler/executable.h"
#include "device/compiler/report.h"
#include "device/graph/graph.h"
#include "device/runtime/program.h"

namespace ipupod::runtime {

absl::Status BadExecutable(absl::string_view what);

struct ImportedModel {
  graph::Graph graph;
  compiler::Report report;
};

// The executable's model imported (`keep_weights`: initializers stay
// tensors, not folded constants) and checked against the executable's
// recorded inputs, outputs, batch_size_factor (device_iterations x
// replication x `accumulation`; `accumulation_name` names the last factor
// in the error, "" when it is 1) and report.
// Also checks that the report covers what the model needs
// (compiler::CheckReportCoversModel). `options.cancelled` stops the import.
absl::StatusOr<ImportedModel> ImportForProgram(const compiler::Executable& e,
                                               const LoadOptions& options, bool keep_weights,
                                               int64_t accumulation,
                                               absl::string_view accumulation_name);

// Compute, IPU-Link and host time of `m` micro-batches from the report's
// per-IPU figures: the slowest IPU's x m when pipelined over several
// stages (the IPUs advance in lockstep), the sum over IPUs x m otherwise
// (one IPU works at a time). No ramp.
SimulatedTime MicroBatchesTime(const compiler::Report& r, double m);
// One lockstep cycle (the slowest IPU's busy time) when pipelined over
// several stages; 0 otherwise, so a ramp of any number of cycles is 0.
double PipelineCycleSeconds(const compiler::Report& r);

absl::StatusOr<std::unique_ptr<Program>> CreateInferenceProgram(
    std::shared_ptr<const compiler::Executable> executable, const LoadOptions& options);
absl::StatusOr<std::unique_ptr<Program>> CreateTrainingProgram(
    std::shared_ptr<const compiler::Executable> executable, const LoadOptions& options);

}  // namespace ipupod::runtime

#endif  // IPUPOD_RUNTIME_PROGRAM_MODES_H_
