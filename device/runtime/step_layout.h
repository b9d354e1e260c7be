// File: device/runtime/step_layout.h
//
// How one step's host tensors map to micro-batches and back (internal to
// device/runtime/). A step holds batch_size_factor micro-batches, concatenated
// along dim 0 in PopTorch's order: micro-batch j is replica j % R of
// accumulation step (j / R) % A of device iteration j / (R x A), where R is
// the replication factor and A the gradient accumulation steps (1 for
// inference). Replicas vary fastest.
//
// Which micro-batches reach the host (the output mode, device/compiler/
// executable.h HostOutputShape): all - every one; final - the last
// micro-batch of the last device iteration, per replica; every_n:N - the
// last micro-batch of device iterations N-1, 2N-1, ..., per replica; sum -
// every one, summed per replica in order (bool: or).
//
// Thread safety: pure functions.
// Errors: SliceInputs and Concatenate - RESOURCE_EXHAUSTED if memory runs
// out (and INVALID_ARGUMENT only if the caller broke the REQUIRES).
#ifndef IPUPOD_RUNTIME_STEP_LAYOUT_H_
#define IPUPOD_RUNTIME_STEP_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor/tensor.h"
#include "common/tensor/tensor_files.h"
#include "device/compiler/executable.h"

namespace ipupod::runtime {

// Gradient accumulation steps per device iteration (1 for inference).
int64_t AccumulationSteps(const compiler::Executable& e);

// Micro-batch j's slice of every input. REQUIRES: `inputs` in the
// executable's order with their host shapes; j < batch_size_factor.
absl::StatusOr<std::vector<tensor::Tensor>> SliceInputs(
    const compiler::Executable& e, const std::vector<const tensor::Tensor*>& inputs, int64_t j);

// The micro-batches whose outputs the host receives, in host order.
std::vector<int64_t> ReturnedMicroBatches(const compiler::Executable& e);

// results[k][o]: output o of the k-th returned micro-batch. Sum mode folds
// them per replica; other modes return them unchanged.
std::vector<std::vector<tensor::Tensor>> ReduceForOutputMode(
    const compiler::Executable& e, std::vector<std::vector<tensor::Tensor>> results);

// Each output's micro-batches concatenated along dim 0 (host shapes).
absl::StatusOr<tensor::NamedTensors> Concatenate(
    const compiler::Executable& e, const std::vector<std::vector<tensor::Tensor>>& results);

}  // namespace ipupod::runtime

#endif  // IPUPOD_RUNTIME_STEP_LAYOUT_H_
