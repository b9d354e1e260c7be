// File: device/compiler/training_spec.h
//
// The training half of a compile (`ipupod compile --train`): which output
// is the loss, which initializers are trained, and the optimizer with its
// variable/constant split - checked against the model so that every
// problem is a compile error, not a run-time one.
//
//  * Loss: TrainingOptions::loss if given, else the model's only float
//    output with one element (PopTorch's ExampleModelWithLoss returns
//    `(out, loss)`). The backward pass must exist for every op between a
//    weight and the loss (device/training/autodiff.h).
//  * Buffers: what the model's ops update in place (BatchNormalization's
//    running statistics in training mode) plus TrainingOptions::buffers
//    (device/training/buffers.h). They are never trained.
//  * Weights: the parameters the model's declared module state names, of
//    any rank (device/graph/graph.h ModuleState; ipupod.poptorch declares it), or
//    for a model without one every float initializer of rank >= 1 the graph
//    reads (rank-0 floats are then the constants torch.onnx writes for
//    Python numbers); the import keeps them unfolded
//    (device/graph/shape_inference.h). Never buffers or `frozen` ones (torch's
//    requires_grad=False).
//  * Optimizer: PopTorch's names; attributes given explicitly are
//    variables, the rest constants (device/training/optimizer.h); no optimizer
//    means SGD with lr 0.01.
//  * Param groups: trainable weights (each in at most one group) with
//    attributes of their own, all variables ("group/<i>/<attr>"); the
//    flags and loss_scaling must equal the optimizer's
//    (device/training/optimizer.h).
//  * OptimizerStateSlots: the weight-sized fp32 tensors the optimizer keeps
//    per trainable weight (device/training/optimizer.h's state; its scalar <w>/step
//    is negligible and not counted): sgd 1 with momentum, else 0; adam and
//    adamw 2, 3 with amsgrad; rmsprop 1, +1 with momentum, +1 if centered;
//    lamb 2. A momentum that is a variable counts as non-zero (a later run
//    may set it, and PopART then keeps the buffer), a group's too: the
//    count is the largest any weight needs.
//
// Thread safety: pure function.
// Errors: INVALID_ARGUMENT with what to change: no scalar float output (or
// several and no --loss), an unknown loss or frozen name (with the
// candidates), nothing left to train, a bad buffer (buffers.h,
// autodiff.h), an op without a backward rule, an
// unknown optimizer or attribute, or a value out of range, a param group
// naming a weight that is not trained (or one already in a group), a
// group attribute that must equal the optimizer's and does not.
#ifndef IPUPOD_COMPILER_TRAINING_SPEC_H_
#define IPUPOD_COMPILER_TRAINING_SPEC_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "device/compiler/executable.h"
#include "device/graph/graph.h"

namespace ipupod::compiler {

struct TrainingOptions {
  std::string loss;                               // empty: the only scalar float output
  std::string optimizer;                          // empty: "sgd"
  std::map<std::string, double> optimizer_attrs;  // given explicitly: variables
  std::vector<std::string> frozen;                // initializers not to train
  std::map<std::string, std::string> buffers;     // explicit buffer -> update value
  // Param groups: their weights and the attributes given for them
  // (variables), in torch's order.
  std::vector<ParamGroup> param_groups;
};

// REQUIRES: `graph` was imported with FoldOptions::keep_weights.
absl::StatusOr<TrainingSpec> MakeTrainingSpec(const graph::Graph& graph,
                                              const TrainingOptions& options,
                                              int64_t gradient_accumulation_steps);

// Every variable a run may set (SetOptimizer): the optimizer-wide ones by
// name, group i's as "group/<i>/<attr>".
std::map<std::string, double> OptimizerVariables(const TrainingSpec& spec);

// REQUIRES: `spec` came from MakeTrainingSpec (a known optimizer).
int64_t OptimizerStateSlots(const TrainingSpec& spec);
// Bytes of optimizer state per element of a weight of `weight_dtype`: each
// slot in its type (device/training/optimizer.h): SGD's momentum buffer in the
// weight's, the first- and second-order slots of the others in
// first_/second_order_momentum_accum_type (float32 unless 16).
int64_t OptimizerStateElementBytes(const TrainingSpec& spec, tensor::DType weight_dtype);

}  // namespace ipupod::compiler

#endif  // IPUPOD_COMPILER_TRAINING_SPEC_H_
