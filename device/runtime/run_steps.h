// File: device/runtime/run_steps.h
//
// PlanSteps checks the tensors of an inputs file against an executable
// (every input present, nothing extra, dtype and per-sample shape, the
// same sample count in each) and splits the samples into steps of
// samples_per_step = micro_batch x batch_size_factor (device_iterations x
// replication, and x gradient_accumulation_steps for training). The steps
// themselves (driver::StepPlan, StepInputs, OutputAccumulator) are in
// common/driver/steps.h.
//
// Thread safety: pure functions.
// Errors: INVALID_ARGUMENT naming the file, the tensor and what to change
// (the expected shape, the step size and how it is made).
#ifndef IPUPOD_RUNTIME_RUN_STEPS_H_
#define IPUPOD_RUNTIME_RUN_STEPS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/driver/steps.h"
#include "common/tensor/tensor_files.h"
#include "device/compiler/executable.h"

namespace ipupod::runtime {

using driver::StepPlan;

// "micro-batch 2 x device_iterations 4 x replication 2".
std::string StepSizeText(const compiler::Executable& executable);

// `file` names the inputs file in messages.
absl::StatusOr<StepPlan> PlanSteps(const compiler::Executable& executable,
                                   tensor::NamedTensors inputs, absl::string_view file);

}  // namespace ipupod::runtime

#endif  // IPUPOD_RUNTIME_RUN_STEPS_H_
