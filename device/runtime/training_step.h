// File: device/runtime/training_step.h
//
// The training half of runtime::Program (internal to device/runtime/): building
// the training::Trainer from a training executable, one training step,
// checkpoints and optimizer variables.
//
// A step (TrainStep) is device_iterations weight updates. Update i takes
// the gradient_accumulation_steps x replicas micro-batches of device
// iteration i (step_layout.h's order) and averages their gradients before
// one optimizer step (device/training/trainer.h). Outputs are the forward's
// results (before that update), thinned by the output mode; the losses are
// one per update: the mean of its micro-batches' losses, which is the loss
// of the equivalent large batch when the loss is a mean.
//
// Checkpoints (ExportCheckpoint) are named tensors: every trainable
// weight and buffer, the optimizer state as "optimizer/<weight>/<slot>" and
// "optimizer/step" (int64), and the optimizer's attributes as
// "optimizer_attr/<name>" (float32 scalars; param group i's as
// "optimizer_attr/group/<i>/<attr>"), so a resumed run also gets
// any learning rate SetOptimizer changed (a float32 value equal to the
// current attribute's float32 rounding keeps the exact current value, so a
// restore never perturbs lr). ImportCheckpoint takes that back whole: all
// or nothing.
//
// Thread safety: the caller serialises calls on one Trainer.
// Errors: INVALID_ARGUMENT for a malformed executable, a bad input (naming
// the micro-batch), a checkpoint that lacks or has foreign tensors, an
// unknown optimizer attribute or a value out of range;
// FAILED_PRECONDITION for changing a constant attribute ("it was fixed
// at compile time: recompile with --opt NAME=VALUE to make it a
// variable").
#ifndef IPUPOD_RUNTIME_TRAINING_STEP_H_
#define IPUPOD_RUNTIME_TRAINING_STEP_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device/compiler/executable.h"
#include "device/graph/graph.h"
#include "device/runtime/program.h"
#include "device/training/trainer.h"

namespace ipupod::runtime {

// The optimizer a training executable was compiled with.
absl::StatusOr<training::OptimizerSpec> OptimizerSpecOf(const compiler::TrainingSpec& spec);

absl::StatusOr<std::unique_ptr<training::Trainer>> CreateTrainer(const compiler::Executable& e,
                                                                 graph::Graph graph);

// REQUIRES: `inputs` arranged in the executable's order with host shapes.
absl::StatusOr<StepResult> TrainStep(const compiler::Executable& e, training::Trainer& trainer,
                                     const std::vector<const tensor::Tensor*>& inputs);

// True if `tensors` holds optimizer state (a checkpoint, not just weights).
bool IsCheckpoint(const tensor::NamedTensors& tensors);
tensor::NamedTensors ExportCheckpoint(const training::Trainer& trainer);
absl::Status ImportCheckpoint(training::Trainer& trainer, const tensor::NamedTensors& checkpoint);

// All or nothing. Names as Optimizer::SetVariable takes them ("lr",
// "group/1/lr").
absl::Status SetOptimizerVariables(training::Optimizer& optimizer,
                                   const std::map<std::string, double>& values);
OptimizerState DescribeOptimizer(const training::Trainer& trainer);

absl::Status NotTraining(absl::string_view what);

}  // namespace ipupod::runtime

#endif  // IPUPOD_RUNTIME_TRAINING_STEP_H_
