// File: device/graph/interpreter.h
//
// graph::Interpreter: the reference executor. Runs a static-shape Graph (as
// produced by ImportOnnx / InferShapesAndFold) on host tensors with the
// ipupod_kernels ops, node by node in topological order, and reports the
// FLOPs of every node (the basis of simulated-time modelling).
//
// Memory: initializers are read in place (never copied); each intermediate is
// freed right after its last consumer runs.
//
// Prepared values: a node whose inputs are all initializers (or prepared
// values) - a Linear's transposed weight, a tied head's transposed table, a
// position embedding looked up at constant positions - is computed once when
// the interpreter is created and again whenever ReplaceInitializers writes
// the weights, not on every Run: an IPU keeps such values resident too. The
// import keeps weights unfolded (device/graph/shape_inference.h, keep_weights), so
// the values are recomputed from what was written instead of frozen at
// compile time. Only values derived from weights are prepared, at most the
// initializers' bytes plus kPreparedSlackBytes (a crafted model cannot make
// a load allocate more than its weights again); a node beyond that runs on
// every Run.
//
// Thread safety: Run() is const and may be called from several threads at
// once (each run has its own buffers). ReplaceInitializers (new weights) is
// the one mutation: it must not overlap Run() or any other call. BLAS
// worker threads are bounded by device/kernels/threads.h.
// Errors: Create - INVALID_ARGUMENT if the graph has not been through
// InferShapesAndFold or holds an unsupported node. Run - INVALID_ARGUMENT
// for the wrong number, dtype or shape of inputs (message names the input)
// and for data errors a kernel finds (e.g. a Gather index out of range);
// RESOURCE_EXHAUSTED if memory runs out; the thread's interrupt status
// (device/kernels/interrupt.h: checked before and after every node, polled inside
// the kernels) when the caller's poll stopped the run. A failed Run changes
// nothing.
// ReplaceInitializers - INVALID_ARGUMENT naming the value (see there).
#ifndef IPUPOD_GRAPH_INTERPRETER_H_
#define IPUPOD_GRAPH_INTERPRETER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tensor/tensor.h"
#include "device/graph/graph.h"

namespace ipupod::graph {

// Static cost of one node, in graph node order.
struct NodeCost {
  std::string name;
  std::string op_type;
  std::string module_path;
  int64_t flops = 0;
};

// What one Run() measured, per node in graph order.
struct RunStats {
  struct Node {
    int64_t flops = 0;
    int64_t elapsed_ns = 0;  // host wall time of the kernel
  };
  std::vector<Node> nodes;
  int64_t total_flops = 0;
  int64_t elapsed_ns = 0;
};

inline constexpr int64_t kPreparedSlackBytes = int64_t{64} << 10;

class Interpreter {
 public:
  static absl::StatusOr<std::unique_ptr<Interpreter>> Create(Graph graph);

  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;
  ~Interpreter();

  const Graph& graph() const { return graph_; }
  const std::vector<NodeCost>& node_costs() const { return costs_; }
  int64_t total_flops() const { return total_flops_; }

  // Runs the graph. `inputs` follow graph().inputs order, each with exactly
  // the declared dtype and shape. Returns graph().outputs in order.
  // `stats` (optional) receives per-node FLOPs and timings on success.
  absl::StatusOr<std::vector<Tensor>> Run(absl::Span<const Tensor> inputs,
                                          RunStats* stats = nullptr) const;

  // Swaps new values into existing initializers (e.g. new weights), all or
  // nothing; on success `values` holds the old values, in the same order.
  // Each must have the initializer's exact dtype and shape. INVALID_ARGUMENT
  // naming the value if it is not an initializer, is given twice, differs
  // in dtype or shape, or feeds an operand the plan fixed by value (a shape,
  // axes, pads: the node's output type would change); nothing changes then.
  // REQUIRES: no other call on this Interpreter runs meanwhile.
  absl::Status ReplaceInitializers(std::vector<std::pair<std::string, Tensor>>& values);

 private:
  struct Step;
  using SlotMap = std::map<std::string, int>;
  explicit Interpreter(Graph graph);
  absl::Status Plan();
  absl::StatusOr<int> AddSlot(const std::string& name, SlotMap& slot_of);
  absl::Status PlanStep(const Node& node, SlotMap& slot_of);
  void PlanLiveness();
  absl::Status PlanOutputs(Step& step);
  absl::Status CheckInputs(absl::Span<const Tensor> inputs) const;
  absl::Status CheckReplacement(const std::vector<std::pair<std::string, Tensor>>& values) const;
  absl::Status RecheckTypesAfterReplacing(const std::vector<const Tensor*>& replaced) const;
  // Marks and computes the prepared steps (see the header comment).
  absl::Status PlanPrepared();
  // Computes the prepared steps that read `replaced` initializers (directly
  // or through another prepared step) from their current values; every
  // prepared step when `replaced` is null.
  absl::Status Prepare(const std::vector<const Tensor*>* replaced = nullptr);
  absl::Status RunStep(const Step& step, const std::vector<const Tensor*>& value,
                       std::vector<Tensor>& outs) const;
  absl::StatusOr<std::vector<Tensor>> Execute(absl::Span<const Tensor> inputs,
                                              RunStats* stats) const;

  Graph graph_;
  std::vector<Step> steps_;
  std::vector<std::string> slot_names_;  // value name per slot
  std::vector<const TensorType*> slot_types_;
  // Per slot: the initializer or prepared value; nullptr for values a Run
  // computes.
  std::vector<const Tensor*> constants_;
  std::vector<Tensor> prepared_values_;  // per slot; empty unless prepared
  std::vector<int> input_slots_;
  std::vector<int> output_slots_;
  std::vector<NodeCost> costs_;
  int64_t total_flops_ = 0;
};

}  // namespace ipupod::graph

#endif  // IPUPOD_GRAPH_INTERPRETER_H_
