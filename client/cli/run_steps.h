// File: client/cli/run_steps.h
//
// The host-side data handling of `ipupod run`, pure so it is unit-testable:
//   * PlanSteps checks the tensors of an inputs file against an executable
//     (every input present, nothing extra, dtype and per-sample shape, the
//     same sample count in each) and splits the samples into steps of
//     samples_per_step = micro_batch x batch_size_factor (device_iterations x
//     replication, and x gradient_accumulation_steps for training);
//   * StepInputs cuts one step out of every input (dim 0);
//   * OutputAccumulator concatenates the outputs of consecutive steps along
//     dim 0, keyed by output name.
//
// Thread safety: functions are pure; an OutputAccumulator is a plain value.
// Errors: INVALID_ARGUMENT naming the file, the tensor and what to change
// (the expected shape, the step size and how it is made).
#ifndef IPUPOD_CLIENT_CLI_RUN_STEPS_H_
#define IPUPOD_CLIENT_CLI_RUN_STEPS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/executable.h"
#include "runtime/tensor_files.h"

namespace ipupod::cli {

struct StepPlan {
  runtime::NamedTensors inputs;  // in the executable's input order
  int64_t samples = 0;           // dim 0 of every input
  int64_t samples_per_step = 1;
  int64_t steps = 0;
};

// "micro-batch 2 x device_iterations 4 x replication 2".
std::string StepSizeText(const compiler::Executable& executable);

// `file` names the inputs file in messages.
absl::StatusOr<StepPlan> PlanSteps(const compiler::Executable& executable,
                                   runtime::NamedTensors inputs, absl::string_view file);

// Rows [begin, begin + count) of dim 0. REQUIRES: rank >= 1.
absl::StatusOr<graph::Tensor> SliceRows(const graph::Tensor& tensor, int64_t begin, int64_t count);

// Step `step` (0-based) of every input. REQUIRES: step < plan.steps.
absl::StatusOr<runtime::NamedTensors> StepInputs(const StepPlan& plan, int64_t step);

class OutputAccumulator {
 public:
  // The first call fixes the names, dtypes and per-row shapes; later steps
  // must match them (INTERNAL otherwise: the server changed its answer).
  absl::Status Append(const runtime::NamedTensors& step_outputs);
  // The concatenation; REQUIRES: at least one Append.
  absl::StatusOr<runtime::NamedTensors> Finish() const;

 private:
  struct Column {
    std::string name;
    graph::DType dtype = graph::DType::kFloat32;
    graph::Shape shape;  // dim 0 grows
    std::string bytes;
  };
  std::vector<Column> columns_;
};

}  // namespace ipupod::cli

#endif  // IPUPOD_CLIENT_CLI_RUN_STEPS_H_
