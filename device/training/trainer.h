// File: device/training/trainer.h
//
// training::Trainer: the weight-update loop of one replicated,
// gradient-accumulating training model, on the host. One Step() is one
// weight update:
//   for each replica r and micro-batch m: forward + backward (Autodiff),
//   gradient = mean over all gradient_accumulation_steps x replicas
//              micro-batch gradients,
//   then one Optimizer step.
// The mean is PopTorch's default accumulation-and-replication reduction
// (Options.Training.accumulationAndReplicationReductionType = Mean): with a
// per-micro-batch mean loss, one update equals torch taking one step on the
// concatenated large batch. Gradients are summed in double before the
// division. A weight that gets no gradient from any micro-batch is not
// updated (torch: grad is None).
//
// With plain SGD (no momentum, no weight decay) and one micro-batch per
// update, the step is fused into the backward pass (Autodiff::RunSgdStep):
// the same update without materialising the weight gradients.
//
// Replicas are simulated one after another: they hold identical weights, so
// running them in sequence gives exactly the all-reduced result.
//
// Buffers (autodiff.h, buffers.h) are updated by every micro-batch in turn,
// in data order (micro-batch m of every replica before m+1), exactly as
// PyTorch running those micro-batches one after another would; each
// micro-batch sees the buffers its predecessor left. With replica_buffers
// (PopTorch's broadcastBuffers(False)) each replica keeps its own copy,
// updated by its own micro-batches in their order; buffers() and FindState
// give replica 0's, SetWeights writes every replica's.
//
// Checkpoints: ExportState() returns the weights and buffers under their own names
// (replica r > 0's own buffers under "replica/<r>/<name>"), the
// optimizer state under "optimizer/<name>" (see optimizer.h; the update
// count is "optimizer/step", int64); ImportState() takes that back, so
// training resumes exactly (a checkpoint without replica r's copies gives
// replica r replica 0's).
//
// Thread safety: not thread-safe; one owner serialises calls.
// Errors: Create - INVALID_ARGUMENT for gradient_accumulation_steps or
// replicas < 1, a param group naming a weight that is not trained, and
// what Autodiff::Create / Optimizer::Create reject.
// Step - INVALID_ARGUMENT for the wrong number of micro-batches or a bad
// input (message names the micro-batch); SetWeights - INVALID_ARGUMENT for
// an unknown name or a dtype/shape mismatch; ImportState - INVALID_ARGUMENT
// for missing, unknown or mis-shaped tensors. A failed call changes nothing.
#ifndef IPUPOD_TRAINING_TRAINER_H_
#define IPUPOD_TRAINING_TRAINER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "device/graph/graph.h"
#include "device/training/autodiff.h"
#include "device/training/optimizer.h"

namespace ipupod::training {

struct TrainerOptions {
  std::string loss;                  // a float scalar value of the graph
  std::vector<std::string> weights;  // trainable initializers; empty: see Autodiff::Create
  int64_t gradient_accumulation_steps = 1;
  int64_t replicas = 1;
  OptimizerSpec optimizer;       // default: SGD, lr 0.01
  BufferUpdates buffers;         // see buffers.h (AllBufferUpdates)
  bool replica_buffers = false;  // each replica its own buffers (broadcastBuffers(False))
  // IPUConfig auto_loss_scaling: Optimizer::EnableAutomaticLossScaling.
  bool auto_loss_scaling = false;
};

struct StepResult {
  // One loss per micro-batch, in the order they were given.
  std::vector<float> losses;
  // The graph outputs of every micro-batch (before the update), same order.
  std::vector<std::vector<tensor::Tensor>> outputs;
  int64_t step = 0;         // updates done so far, this one included
  double loss_scale = 1.0;  // the loss scale this step's gradients were computed with
  bool skipped = false;     // automatic loss scaling skipped the update (overflow)
  int64_t forward_flops = 0;
  int64_t backward_flops = 0;
};

class Trainer {
 public:
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(graph::Graph graph,
                                                         TrainerOptions options);

  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  int64_t micro_batches_per_step() const {
    return options_.gradient_accumulation_steps * options_.replicas;
  }

  // One weight update. micro_batches[r * gradient_accumulation_steps + m]
  // is replica r's m-th micro-batch: tensors in graph inputs order.
  absl::StatusOr<StepResult> Step(absl::Span<const std::vector<tensor::Tensor>> micro_batches);

  // The graph outputs for `inputs` with the current weights.
  absl::StatusOr<std::vector<tensor::Tensor>> Forward(
      absl::Span<const tensor::Tensor> inputs) const;

  const TensorMap& weights() const { return weights_; }
  const TensorMap& buffers() const { return buffers_; }
  // A weight's or buffer's current value, or nullptr.
  const tensor::Tensor* FindState(const std::string& name) const;
  int64_t step() const { return optimizer_->step(); }
  Optimizer& optimizer() { return *optimizer_; }
  const Optimizer& optimizer() const { return *optimizer_; }
  const Autodiff& autodiff() const { return *autodiff_; }

  // Replaces some weights or buffers (by name; dtype and shape must
  // match). All or nothing; the optimizer state is kept.
  absl::Status SetWeights(const TensorMap& weights);

  TensorMap ExportState() const;
  absl::Status ImportState(const TensorMap& state);

 private:
  Trainer(TrainerOptions options, std::unique_ptr<Autodiff> autodiff,
          std::unique_ptr<Optimizer> optimizer);
  // Runs every micro-batch, leaving the buffers' new values in `buffers`
  // (one map, or one per replica with replica_buffers).
  absl::StatusOr<TensorMap> MeanGradients(
      absl::Span<const std::vector<tensor::Tensor>> micro_batches, std::vector<TensorMap>& buffers,
      StepResult& result) const;

  // Step for one micro-batch with plain SGD at `lr`, fused.
  absl::StatusOr<StepResult> FusedSgdStep(const std::vector<tensor::Tensor>& inputs, double lr);

  // Moves the buffers out of a checkpoint's `state`.
  absl::StatusOr<TensorMap> TakeBuffers(TensorMap& state) const;
  // Moves replicas 1..R-1's buffers ("replica/<r>/<name>") out of `state`;
  // those missing are copies of `replica0`.
  absl::StatusOr<std::vector<TensorMap>> TakeReplicaBuffers(TensorMap& state,
                                                            const TensorMap& replica0) const;

  TrainerOptions options_;
  std::unique_ptr<Autodiff> autodiff_;
  std::unique_ptr<Optimizer> optimizer_;
  TensorMap weights_;
  TensorMap buffers_;                       // replica 0's (every replica's without replica_buffers)
  std::vector<TensorMap> replica_buffers_;  // replica_buffers: replicas 1..R-1's
};

}  // namespace ipupod::training

#endif  // IPUPOD_TRAINING_TRAINER_H_
