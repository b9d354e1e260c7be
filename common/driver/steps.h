// File: common/driver/steps.h
//
// Data in steps, the host-side half of every run, pure so it is
// unit-testable and shared by every driver (the CLI's and the server's):
//   * a StepPlan holds a data set split into `steps` steps: each input
//     gives each step its own number of rows (dim 0), its micro-batch's
//     dim 0 times the step's micro-batches, so a [4, 8] batch may go with a
//     [1, 8] mask; `samples` counts the rows of the executable's batch input
//     (the checks against an executable that make one live where the
//     executable is known: device/runtime/run_steps.h PlanSteps);
//   * StepInputs cuts one step out of every input (dim 0);
//   * OutputAccumulator concatenates the outputs of consecutive steps along
//     dim 0, keyed by output name.
//
// Thread safety: functions are pure; an OutputAccumulator is a plain value.
// Errors: INTERNAL from OutputAccumulator when steps disagree on their
// outputs (the executor changed its answer); what tensor::Tensor::FromBytes
// returns otherwise.
#ifndef IPUPOD_DRIVER_STEPS_H_
#define IPUPOD_DRIVER_STEPS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tensor/tensor_files.h"

namespace ipupod::driver {

struct StepPlan {
  tensor::NamedTensors inputs;  // in the executable's input order
  int64_t samples = 0;          // samples_per_step x steps
  int64_t samples_per_step = 1;
  int64_t steps = 0;
  // The rows of inputs[i] one step takes; empty: samples_per_step each.
  std::vector<int64_t> rows_per_step;
};

// The rows of plan.inputs[input] one step takes.
int64_t RowsPerStep(const StepPlan& plan, size_t input);

// Rows [begin, begin + count) of dim 0. REQUIRES: rank >= 1.
absl::StatusOr<tensor::Tensor> SliceRows(const tensor::Tensor& tensor, int64_t begin,
                                         int64_t count);

// Step `step` (0-based) of every input. REQUIRES: step < plan.steps.
absl::StatusOr<tensor::NamedTensors> StepInputs(const StepPlan& plan, int64_t step);

class OutputAccumulator {
 public:
  // The first call fixes the names, dtypes and per-row shapes; later steps
  // must match them (INTERNAL otherwise: the server changed its answer).
  absl::Status Append(const tensor::NamedTensors& step_outputs);
  // The concatenation; REQUIRES: at least one Append.
  absl::StatusOr<tensor::NamedTensors> Finish() const;

 private:
  struct Column {
    std::string name;
    tensor::DType dtype = tensor::DType::kFloat32;
    tensor::Shape shape;  // dim 0 grows
    std::string bytes;
  };
  std::vector<Column> columns_;
};

}  // namespace ipupod::driver

#endif  // IPUPOD_DRIVER_STEPS_H_
