// File: device/graph/shape_inference.h
//
// The pass that turns a freshly imported Graph into a static-shape one:
//   1. checks every node against the op registry (supported op, opset,
//      operand counts, attributes) and that every input is defined earlier;
//   2. infers the dtype and static shape of every value, in node order;
//   3. folds every node whose inputs are all constants (or, for Shape, whose
//      input shape is known) into a new initializer, within a byte budget
//      (FoldOptions::max_folded_bytes) - this is what removes
//      the Shape/Gather/Concat/Reshape/Equal/Where/Expand chains torch.onnx
//      writes around attention reshapes. With FoldOptions::keep_weights
//      (every program and compile but shape-only uses), the initializers
//      IsVariable names count as variables, not constants: nothing is folded
//      through them, so every weight stays an initializer the graph reads,
//      that a session can write and training can train (a value derived
//      from weights only, such as a Linear's transposed weight, is computed
//      again when they are written: device/graph/interpreter.h);
//      A node whose outputs would overrun the budget is not folded: it stays
//      a node, computed at run time, and the memory plan charges its output
//      as any activation. So a few bytes of ONNX (ConstantOfShape of
//      [30000, 30000]) cannot make the compiler or a server's Load
//      materialise gigabytes; the compile reports what the model needs.
//   4. drops nodes and initializers no graph output depends on;
//   5. checks the inferred output types against the model's declared ones.
// Afterwards graph.value_types holds a static type for every remaining value.
//
// Thread safety: mutates only the graph it is given.
// Errors: INVALID_ARGUMENT naming op and node for unsupported ops or
// attributes, shape errors, non-constant shape operands and undefined or
// duplicate values, and for any value over the shape bounds
// (common/tensor/shape_bounds.h: rank, dims, elements), checked on each node's
// outputs before the next node is visited; RESOURCE_EXHAUSTED if folding
// runs out of memory; CANCELLED if FoldOptions::cancelled says so; the
// thread's interrupt status (device/kernels/interrupt.h) if a poll stopped a fold
// between or inside nodes.
// On error the graph is left unchanged.
#ifndef IPUPOD_GRAPH_SHAPE_INFERENCE_H_
#define IPUPOD_GRAPH_SHAPE_INFERENCE_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "device/graph/graph.h"

namespace ipupod::graph {

// REQUIRES: graph.inputs have fully static shapes; graph.outputs may carry
// -1 dims (unknown). Sets graph.value_types and rewrites nodes/initializers.
struct FoldOptions {
  bool keep_weights = false;  // see step 3
  // The most bytes folding may materialise in one pass (all folded values
  // are held until the pass commits). -1: the larger of kFoldFloorBytes and
  // the bytes of the model's own initializers, so folding at most doubles
  // what the model brought (transposed weights of a large model still fold).
  int64_t max_folded_bytes = -1;
  // Polled before each node; true stops the pass with CANCELLED (a server's
  // Load whose client has gone). Empty: never cancelled.
  std::function<bool()> cancelled = nullptr;
  // Graph::half_partials for the imported graph (and for what folds):
  // IPUConfig enable_half_partials.
  bool half_partials = false;
};

inline constexpr int64_t kFoldFloorBytes = int64_t{256} << 20;

absl::Status InferShapesAndFold(Graph& graph, const FoldOptions& options = {});

// Float32 or float16 of rank >= 1: what a model without a declared module
// state has as weights.
bool IsWeightLike(const Tensor& initializer);
// The initializers FoldOptions::keep_weights keeps: weight-like ones, and
// float ones of any rank that the module state declares (a scalar
// parameter or buffer).
bool IsVariable(const ModuleState& state, const std::string& name, const Tensor& initializer);

}  // namespace ipupod::graph

#endif  // IPUPOD_GRAPH_SHAPE_INFERENCE_H_
