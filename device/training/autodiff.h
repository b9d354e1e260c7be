// File: device/training/autodiff.h
//
// training::Autodiff: reverse-mode gradients of a scalar loss of a
// graph::Graph with respect to chosen float initializers (the trainable
// weights). It works as a tape:
//   forward  - runs the nodes in order with device/graph/ops.h's kernels, keeping
//              the intermediates the backward rules need (and freeing the
//              rest after their last forward reader, like graph::Interpreter);
//   backward - walks the nodes that lie on a path from a weight to the loss
//              in reverse, applying each op's rule (device/training/grad_rules.h),
//              and sums gradients that fan in.
// d(loss)/d(loss) = 1. Integer and bool values carry no gradient; a weight
// that does not reach the loss gets no gradient (torch's `grad is None`),
// which callers must skip, as torch.optim does.
//
// Weights live outside the graph: every Run gets their current values by
// name, so a Trainer can update them without rebuilding anything.
//
// Buffers (PyTorch's register_buffer, e.g. BatchNorm's running statistics)
// are initializers the model overwrites on every forward pass: each maps to
// the value that becomes its next content (device/training/buffers.h finds the
// ones a graph implies). Like weights they come with every call; unlike
// weights they get no gradient. Run returns their new values.
//
// FLOPs: forward_flops follows device/graph/ops.h; backward_flops is what the
// rules report (matrix products 2*M*N*K per operand gradient, elementwise
// work per element), the figure simulated time will be based on.
//
// float16: weights, values and the loss may be float16. Rules compute in
// float32 on widened values, as ops do (device/graph/ops.h, RunOp), and the
// gradient of a float16 value is held as float32 rounded to float16's
// values, so small gradients underflow to zero as they do on the IPU; the
// loss scale (Run's loss_scale, the seed's loss_scaling) seeds the backward
// pass in place of 1 to keep them representable.
//
// Thread safety: Run and Forward are const and may run concurrently (each
// call has its own tape). BLAS threads are bounded by device/kernels/threads.h.
// Errors: Create - INVALID_ARGUMENT if the graph has not been through
// InferShapesAndFold, the loss is not a float value with one element, a
// weight is not a float32 initializer (or is listed twice), or an op on a
// path from a weight to the loss has no backward rule (naming op and node,
// e.g. "Exp node '/Exp': has no gradient rule"; an inference-only op such
// as ai.graphcore.CtcBeamSearchDecoder says it is inference only). Run - INVALID_ARGUMENT for
// inputs or weights of the wrong number, name, dtype or shape and data
// errors kernels find (a label out of range), and buffers that are missing
// or mis-shaped; RESOURCE_EXHAUSTED if memory
// runs out. A failed call changes nothing.
#ifndef IPUPOD_TRAINING_AUTODIFF_H_
#define IPUPOD_TRAINING_AUTODIFF_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/tensor/tensor.h"
#include "device/graph/graph.h"

namespace ipupod::training {

struct ProductGrad;  // grad_rules.h

// Weights by initializer name.
using TensorMap = std::map<std::string, tensor::Tensor>;
// Buffer (initializer) name -> the graph value that replaces it after each
// forward pass.
using BufferUpdates = std::map<std::string, std::string>;

struct GradientResult {
  std::vector<tensor::Tensor> outputs;  // graph outputs, in graph order
  float loss = 0.0f;
  TensorMap gradients;  // one per weight that reaches the loss, weight's shape
  TensorMap buffers;    // every buffer's new value
  int64_t forward_flops = 0;
  int64_t backward_flops = 0;
  // RunSgdStep only: weights whose gradient went straight into the weight
  // as a matrix product, never materialised.
  int64_t fused_products = 0;
};

class Autodiff {
 public:
  // `loss` names a float value with one element (usually a graph output).
  // `weights` name float32 initializers; empty means every float32
  // initializer of rank >= 1. (The rank-0 ones are the scalars torch.onnx
  // writes for Python constants - Pow's 2, GELU's 0.5 - never parameters;
  // callers that know the model's parameters should list them.) Buffers
  // are never weights. Each buffer must be an initializer and its update a
  // value some node computes, of the buffer's dtype and shape.
  static absl::StatusOr<std::unique_ptr<Autodiff>> Create(graph::Graph graph, std::string loss,
                                                          std::vector<std::string> weights,
                                                          BufferUpdates buffers = {});

  Autodiff(const Autodiff&) = delete;
  Autodiff& operator=(const Autodiff&) = delete;
  ~Autodiff();

  const graph::Graph& graph() const { return graph_; }
  const std::string& loss() const { return loss_; }
  // The trainable weights, sorted by name.
  const std::vector<std::string>& weights() const { return weights_; }
  const BufferUpdates& buffers() const { return buffers_; }
  // The graph's own values of the weights (the starting point of training).
  TensorMap InitialWeights() const;
  // The graph's own values of the buffers.
  TensorMap InitialBuffers() const;

  // Forward and backward. `inputs` follow graph().inputs order with their
  // exact dtype and shape; `weights` holds every weight by name and
  // `buffers` every buffer (others are rejected).
  // `loss_scale` is d(loss)/d(loss), the loss scaling factor: gradients
  // come out multiplied by it (the optimizer divides it out).
  absl::StatusOr<GradientResult> Run(absl::Span<const tensor::Tensor> inputs,
                                     const TensorMap& weights, const TensorMap& buffers = {},
                                     double loss_scale = 1.0) const;

  // Forward, backward and a plain SGD step in one call: every weight with a
  // gradient becomes w + (-lr) * dL/dw, as torch.optim.SGD without momentum
  // or weight decay computes it, and result.gradients is left empty. A
  // weight whose gradient is one matrix product (the weight operand of
  // Gemm or of MatMul by a 2-D weight) and that nothing else gives a
  // gradient is updated by that product accumulating into it (sgemm with
  // beta 1): its gradient is never materialised, zero-filled or re-read
  // (result.fused_products counts these). Other weights get the update from
  // their materialised gradient. The weights change only after the forward
  // and backward passes have succeeded (shapes are checked before the first
  // update); on any error they are as they were.
  absl::StatusOr<GradientResult> RunSgdStep(absl::Span<const tensor::Tensor> inputs,
                                            TensorMap& weights, const TensorMap& buffers,
                                            double lr) const;

  // Forward only (no tape): the graph outputs with these weights and
  // buffers (whose updates are dropped).
  absl::StatusOr<std::vector<tensor::Tensor>> Forward(absl::Span<const tensor::Tensor> inputs,
                                                      const TensorMap& weights,
                                                      const TensorMap& buffers = {}) const;

 private:
  struct Step;
  struct Tape;
  Autodiff(graph::Graph graph, std::string loss, std::vector<std::string> weights,
           BufferUpdates buffers);
  absl::Status Plan();
  absl::Status PlanSlots();
  absl::Status PlanBuffers();
  absl::Status PlanStep(const graph::Node& node);
  // Rounds `grad` (float32) through float16 when value `slot` is float16.
  absl::Status RoundIfHalf(int slot, tensor::Tensor& grad) const;
  absl::Status PlanGradientPath();
  void PlanLiveness();
  absl::Status CheckCall(absl::Span<const tensor::Tensor> inputs, const TensorMap& weights,
                         const TensorMap& buffers) const;
  Tape NewTape(absl::Span<const tensor::Tensor> inputs, const TensorMap& weights,
               const TensorMap& buffers, bool with_gradients) const;
  absl::Status RunForward(Tape& tape, bool keep_for_backward) const;
  absl::Status RunBackward(Tape& tape, GradientResult& result) const;
  absl::Status BackwardStep(const Step& step, Tape& tape, int64_t& flops) const;
  absl::StatusOr<GradientResult> Execute(Tape& tape) const;
  absl::Status DeferProduct(const Step& step, size_t input, ProductGrad product, Tape& tape) const;
  absl::Status ApplySgd(const Tape& tape, float neg_lr, TensorMap& weights,
                        GradientResult& result) const;

  graph::Graph graph_;
  std::string loss_;
  std::vector<std::string> weights_;
  BufferUpdates buffers_;
  std::map<std::string, int> slot_of_;
  std::vector<const graph::TensorType*> slot_types_;
  std::vector<const tensor::Tensor*> constants_;   // per slot; initializers except weights
  std::vector<int> weight_slots_;                  // parallel to weights_
  std::vector<std::pair<int, int>> buffer_slots_;  // (buffer, update) in buffers_ order
  std::vector<int> input_slots_;
  std::vector<int> output_slots_;
  int loss_slot_ = -1;
  std::vector<Step> steps_;
  std::vector<bool> requires_grad_;  // per slot
  std::vector<bool> saved_;          // per slot: kept by the tape for a backward rule
  // Per slot: a weight that exactly one backward input gives a gradient,
  // which RunSgdStep may leave as a product.
  std::vector<bool> deferrable_;
  int64_t forward_flops_ = 0;
};

}  // namespace ipupod::training

#endif  // IPUPOD_TRAINING_AUTODIFF_H_
